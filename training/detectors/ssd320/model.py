"""SSD320 v1.2 (NVIDIA's TensorFlow SSD ResNet-50 FPN, a RetinaNet at 320x320) in PyTorch.

Tensor contract:
    input  ``images``: float32 ``[N, 3, S, S]`` (S = ``image_size``, 320 for the reference), RGB scaled to
    0-1 then ImageNet-normalized (torchvision's backbone convention; TF subtracts the mean only).
    output ``(box_regression, cls_logits)``: ``box_regression [N, A, 4]`` Faster R-CNN codes
    (tx, ty, tw, th with scales 10, 10, 5, 5) against ``anchors.generate_anchors_xywh`` and
    ``cls_logits [N, A, C]`` sigmoid logits, no background class; A = 12,804 at S = 320.
Loss, matching and post-processing live beside this module (``loss``, ``postprocess``); the trainer's
glue is ``training.detectors.ssd320.task``.

``freeze_bn`` keeps every BatchNorm in inference mode while training (running statistics are used and
not updated; their scale and shift still learn), TF's ``freeze_batchnorm: true``. It is for fine-tuning
from ImageNet weights; from scratch it must stay off.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from torch import Tensor, nn

from training.detectors.ssd320.anchors import AnchorConfig
from training.detectors.ssd320.backbone import ResNetFPN
from training.detectors.ssd320.head import WeightSharedHead


class SSD320(nn.Module):
    def __init__(
        self,
        num_classes: int = 80,
        backbone: str = "resnet50",
        backbone_weights: str | Path | None = None,
        image_size: int = 320,
        freeze_bn: bool = False,
    ) -> None:
        """``num_classes`` is the number of object classes (sigmoid outputs; there is no background)."""
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.num_classes = num_classes
        self.image_size = image_size
        self.anchors = AnchorConfig(image_size=image_size)
        self.freeze_bn = freeze_bn
        self.backbone = ResNetFPN(backbone, backbone_weights)
        self.head = WeightSharedHead(
            num_classes,
            self.anchors.anchors_per_location,
            self.anchors.feature_sizes,
            channels=self.backbone.out_channels,
        )

    def train(self, mode: bool = True) -> SSD320:
        super().train(mode)
        if mode and self.freeze_bn:
            for module in self.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.eval()
        return self

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        expected = (3, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images must be [N, {expected[0]}, {expected[1]}, {expected[2]}] (the anchors are laid "
                f"out for image_size {self.image_size}), got {tuple(images.shape)}"
            )
        return cast("tuple[Tensor, Tensor]", self.head(self.backbone(images)))

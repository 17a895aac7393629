"""SSD300 v1.1 (NVIDIA DeepLearningExamples architecture) with a selectable ResNet backbone.

Tensor contract:
    input  ``images``: float32 ``[N, 3, 300, 300]``, RGB scaled to 0-1 then ImageNet-normalized.
    output ``(locs, confs)``: ``locs [N, 4, A]`` box regression codes against the default boxes
    (scale_xy 0.1, scale_wh 0.2) and ``confs [N, C + 1, A]`` class logits (0 = background), A = 8732.
Training targets, loss and post-processing live beside this module (``targets``, ``loss``, ``postprocess``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from training.detectors.ssd300.backbone import ResNetBackbone
from training.detectors.ssd300.default_boxes import DefaultBoxesConfig

_EXTRA_WIDTHS = (256, 256, 128, 128, 128)


def _extra_block(c_in: int, c_mid: int, c_out: int, downsample: bool) -> nn.Sequential:
    conv = (
        nn.Conv2d(c_mid, c_out, kernel_size=3, padding=1, stride=2, bias=False)
        if downsample
        else nn.Conv2d(c_mid, c_out, kernel_size=3, bias=False)  # 5 -> 3 and 3 -> 1
    )
    return nn.Sequential(
        nn.Conv2d(c_in, c_mid, kernel_size=1, bias=False),
        nn.BatchNorm2d(c_mid),
        nn.ReLU(inplace=True),
        conv,
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class SSD300(nn.Module):
    def __init__(
        self,
        num_classes: int = 80,
        backbone: str = "resnet50",
        backbone_weights: str | Path | None = None,
        boxes: DefaultBoxesConfig | None = None,
    ) -> None:
        """``num_classes`` excludes background; the heads predict ``num_classes + 1`` scores."""
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.boxes = boxes or DefaultBoxesConfig()
        self.num_classes = num_classes
        self.label_num = num_classes + 1
        self.feature_extractor = ResNetBackbone(backbone, backbone_weights)
        channels = self.feature_extractor.out_channels
        self.additional_blocks = nn.ModuleList(
            _extra_block(c_in, c_mid, c_out, downsample=i < 3)
            for i, (c_in, c_out, c_mid) in enumerate(
                zip(channels[:-1], channels[1:], _EXTRA_WIDTHS, strict=True)
            )
        )
        per_loc = self.boxes.boxes_per_location
        self.loc = nn.ModuleList(
            nn.Conv2d(c, nd * 4, kernel_size=3, padding=1) for nd, c in zip(per_loc, channels, strict=True)
        )
        self.conf = nn.ModuleList(
            nn.Conv2d(c, nd * self.label_num, kernel_size=3, padding=1)
            for nd, c in zip(per_loc, channels, strict=True)
        )
        self._init_weights()

    def _init_weights(self) -> None:
        for module in [*self.additional_blocks, *self.loc, *self.conf]:
            for param in module.parameters():
                if param.dim() > 1:
                    nn.init.xavier_uniform_(param)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [N, 3, H, W], got {tuple(images.shape)}")
        x = self.feature_extractor(images)
        features = [x]
        for block in self.additional_blocks:
            x = block(x)
            features.append(x)
        locs, confs = [], []
        for feat, loc, conf in zip(features, self.loc, self.conf, strict=True):
            n = feat.shape[0]
            # (N, nd*4, H, W) -> (N, 4, nd*H*W): NVIDIA's reshape, which fixes the default-box order.
            locs.append(loc(feat).reshape(n, 4, -1))
            confs.append(conf(feat).reshape(n, self.label_num, -1))
        return torch.cat(locs, dim=2).contiguous(), torch.cat(confs, dim=2).contiguous()

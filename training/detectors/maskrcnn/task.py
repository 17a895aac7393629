"""Mask R-CNN glue: torchvision computes its own losses; prediction keeps the 28x28 masks unpasted.

Training batches are ``(images uint8 [B, Hb, Wb, 3], sizes, targets)`` (``training.detectors.maskrcnn.data``);
each image is cut from the padded batch and handed to torchvision as 0-1 floats, which normalizes and
batches them itself. Evaluation batches are letterboxed ``uint8 [B, S, S, 3]``; :meth:`predict` returns
boxes normalized to that input and ``masks`` ``[K, 28, 28]`` probabilities that the evaluator pastes
into the original image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch import Tensor, nn
from torchvision.models.detection import MaskRCNN

from training.detectors.maskrcnn.data import build_eval_loader, maskrcnn_train_loader
from training.detectors.maskrcnn.model import (
    PAD_VALUE,
    detect,
    maskrcnn_resnet50_fpn,
    maskrcnn_resnet50_fpn_v2,
    normalize,
)
from training.detectors.task import Batch, LoaderRequest, Prediction, TrainLoader, reject_scale_jitter

DEFAULT_IMAGE_SIZE = 1088


class MaskRCNNLoss(nn.Module):
    """Sum of torchvision's five Mask R-CNN losses (classifier, box, mask, objectness, RPN box)."""

    def forward(self, losses: dict[str, Tensor]) -> Tensor:
        if not losses:
            raise ValueError("the model returned no losses; is it in training mode?")
        return torch.stack([value for value in losses.values()]).sum()


class MaskRCNNTask:
    model_name = "maskrcnn_resnet50_fpn"
    builder: Callable[..., MaskRCNN] = staticmethod(maskrcnn_resnet50_fpn)

    def __init__(self, model_args: dict[str, Any]) -> None:
        self.model_args = model_args
        size = int(model_args.get("image_size", DEFAULT_IMAGE_SIZE))
        self.input_size = (size, size)

    def build_model(self, backbone_weights: str | None = None) -> nn.Module:
        return cast("nn.Module", type(self).builder(**self.model_args, backbone_weights=backbone_weights))

    def build_criterion(self) -> nn.Module:
        return MaskRCNNLoss()

    def train_loader(
        self, request: LoaderRequest, scale_jitter: tuple[float, float] | None = None
    ) -> TrainLoader:
        reject_scale_jitter(self.model_name, scale_jitter)
        if request.kind != "torch":
            raise ValueError(
                f"{self.model_name} trains with the plain PyTorch pipeline (--pipeline torch), "
                f"not {request.kind!r}: "
                "its augmentation transforms instance masks with the image"
            )
        return maskrcnn_train_loader(request, self.input_size[0])

    def eval_loader(self, root: str, split: str, batch_size: int, workers: int) -> Iterable[Batch]:
        return build_eval_loader(root, split, self.input_size[0], PAD_VALUE, batch_size, workers)

    def loss(self, model: nn.Module, criterion: nn.Module, batch: Batch, device: torch.device) -> Tensor:
        images, sizes, targets = batch
        inputs = [
            # (h, w, 3) uint8 -> (3, h, w) 0-1 float, as torchvision's detection models take images
            images[i, :h, :w].to(device, non_blocking=True).permute(2, 0, 1).float().div_(255.0)
            for i, (h, w) in enumerate(sizes)
        ]
        device_targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
        return cast("Tensor", criterion(model(inputs, device_targets)))

    @torch.no_grad()
    def predict(self, model: nn.Module, images: Tensor) -> list[Prediction]:
        if not isinstance(model, MaskRCNN):
            raise TypeError(f"{self.model_name} prediction needs a torchvision MaskRCNN, got {type(model)}")
        height, width = self.input_size
        scale = torch.tensor([width, height, width, height], dtype=torch.float32, device=images.device)
        results = []
        for det in detect(model, normalize(images)):
            prediction = {
                "boxes": det["boxes"].float() / scale,
                "scores": det["scores"].float(),
                "labels": det["labels"],
                "masks": det["masks"][:, 0].float(),
            }
            results.append(cast(Prediction, prediction))
        return results


class MaskRCNNV2Task(MaskRCNNTask):
    model_name = "maskrcnn_resnet50_fpn_v2"
    builder = staticmethod(maskrcnn_resnet50_fpn_v2)

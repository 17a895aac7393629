"""EfficientDet-D0 glue: loaders yield ``(images, padded boxes in input pixels, labels)``; the loss labels
the anchors on the training device (effdet's labeller) and applies effdet's focal + Huber loss; prediction
is effdet's post-processing (top 5000, class-aware NMS 0.5, 100 per image) on letterboxed inputs.

Model arguments (stored in checkpoints): ``num_classes``, ``backbone`` (``tf_efficientnet_b0`` |
``efficientnet_b0`` | ``nvidia_efficientnet_b0``), ``image_size`` (multiple of 128; default 512).
effdet is imported when the task is created, not when this module is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor, nn

from training.detectors.efficientdet.loaders import (
    build_efficientdet_eval_loader,
    efficientdet_train_loader,
)
from training.detectors.efficientdet.transforms import SCALE_JITTER
from training.detectors.task import Batch, LoaderRequest, Prediction, TrainLoader, images_to

BACKBONE_NAMES = ("tf_efficientnet_b0", "efficientnet_b0", "nvidia_efficientnet_b0")


class EfficientDetTask:
    model_name = "efficientdet-d0"

    def __init__(self, model_args: dict[str, Any]) -> None:
        from training.detectors.efficientdet.model import DEFAULT_IMAGE_SIZE, efficientdet_d0_config
        from training.detectors.efficientdet.postprocess import PostprocessConfig

        backbone = model_args.get("backbone")
        if backbone not in BACKBONE_NAMES:
            raise ValueError(
                f"efficientdet-d0 needs --backbone {' | '.join(BACKBONE_NAMES)} (got {backbone!r}); "
                "or use a preset: efficientdet-d0-coco, efficientdet-d0-cpu-small"
            )
        self.model_args = model_args
        self.image_size = int(model_args.get("image_size", DEFAULT_IMAGE_SIZE))
        self.num_classes = int(model_args["num_classes"])
        self.config = efficientdet_d0_config(self.num_classes, backbone, self.image_size)
        self.post = PostprocessConfig()
        self._anchors: Tensor | None = None

    def build_model(self, backbone_weights: str | None = None) -> nn.Module:
        from training.detectors.efficientdet.model import EfficientDetD0

        return EfficientDetD0(**self.model_args, backbone_weights=backbone_weights)

    def build_criterion(self) -> nn.Module:
        from training.detectors.efficientdet.loss import EfficientDetLoss

        return EfficientDetLoss(self.config)

    def train_loader(
        self, request: LoaderRequest, scale_jitter: tuple[float, float] | None = None
    ) -> TrainLoader:
        return efficientdet_train_loader(
            request, size=self.image_size, scale_range=scale_jitter or SCALE_JITTER
        )

    def eval_loader(self, root: str, split: str, batch_size: int, workers: int) -> Iterable[Batch]:
        return build_efficientdet_eval_loader(
            root, split, size=self.image_size, batch_size=batch_size, workers=workers
        )

    def loss(self, model: nn.Module, criterion: nn.Module, batch: Batch, device: torch.device) -> Tensor:
        images, boxes, labels = batch
        images = images_to(images, model, device)
        class_outputs, box_outputs = model(images)
        boxes, labels = boxes.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        return cast(Tensor, criterion(class_outputs, box_outputs, boxes, labels))

    def anchors(self) -> Tensor:
        """effdet's anchors for this input size, ``[A, 4]`` y1, x1, y2, x2 pixels (computed once)."""
        if self._anchors is None:
            from training.detectors.efficientdet.effdet_compat import Anchors

            self._anchors = Anchors.from_config(self.config).boxes
        return self._anchors

    @torch.no_grad()
    def predict(self, model: nn.Module, images: Tensor) -> list[Prediction]:
        from training.detectors.efficientdet.postprocess import detections

        class_outputs, box_outputs = model(images)
        results = detections(
            class_outputs, box_outputs, self.anchors(), self.num_classes, self.image_size, self.post
        )
        size = float(self.image_size)
        return [
            cast(
                Prediction,
                {"boxes": (r["boxes"] / size).clamp(0.0, 1.0), "scores": r["scores"], "labels": r["labels"]},
            )
            for r in results
        ]

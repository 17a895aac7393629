"""SSD300 glue: loaders yield ``(images, matched boxes, labels)``; prediction is NVIDIA's post-processing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor, nn

from training.detectors.ssd300.default_boxes import default_boxes_xywh
from training.detectors.ssd300.loaders import build_ssd_eval_loader, ssd_train_loader
from training.detectors.ssd300.loss import SSDLoss
from training.detectors.ssd300.model import SSD300
from training.detectors.ssd300.postprocess import EVAL_SETTINGS, postprocess
from training.detectors.task import (
    Batch,
    LoaderRequest,
    Prediction,
    TrainLoader,
    images_to,
    reject_scale_jitter,
)


class SSD300Task:
    model_name = "ssd300"
    input_size = (300, 300)

    def __init__(self, model_args: dict[str, Any]) -> None:
        self.model_args = model_args
        self.dboxes = default_boxes_xywh()
        self.post = EVAL_SETTINGS

    def build_model(self, backbone_weights: str | None = None) -> nn.Module:
        return SSD300(**self.model_args, backbone_weights=backbone_weights)

    def build_criterion(self) -> nn.Module:
        return SSDLoss(self.dboxes)

    def train_loader(
        self, request: LoaderRequest, scale_jitter: tuple[float, float] | None = None
    ) -> TrainLoader:
        reject_scale_jitter(self.model_name, scale_jitter)
        return ssd_train_loader(request)

    def eval_loader(self, root: str, split: str, batch_size: int, workers: int) -> Iterable[Batch]:
        return build_ssd_eval_loader(root, split, batch_size=batch_size, workers=workers)

    def loss(self, model: nn.Module, criterion: nn.Module, batch: Batch, device: torch.device) -> Tensor:
        images, boxes, labels = batch
        images = images_to(images, model, device)
        locs, confs = model(images)
        return cast(
            "Tensor",
            criterion(locs, confs, boxes.to(device, non_blocking=True), labels.to(device, non_blocking=True)),
        )

    @torch.no_grad()
    def predict(self, model: nn.Module, images: Tensor) -> list[Prediction]:
        locs, confs = model(images)
        results = postprocess(locs, confs, self.dboxes.to(locs.device), self.post)
        return [cast(Prediction, r) for r in results]

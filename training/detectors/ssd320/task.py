"""SSD320 glue: loaders yield ``(images, matched boxes, labels)`` against the SSD320 anchors; the loss is
focal + smooth L1; prediction is TF's post-processing (sigmoid, per-class NMS at IoU 0.6, 100 per image).

The training batch is SSD300's (``training.detectors.ssd300.loaders``): per anchor the matched ground truth
in centre form and its label (0 = unmatched), matched by ``box_ops.match_anchors`` (IoU > 0.5 plus a forced
match for every object: TF's argmax matcher with ``force_match_for_each_row``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor, nn

from training.detectors.ssd300.loaders import build_ssd_eval_loader, ssd_train_loader
from training.detectors.ssd320.anchors import AnchorConfig, generate_anchors_xywh, generate_anchors_xyxy
from training.detectors.ssd320.loss import FocalLoss
from training.detectors.ssd320.model import SSD320
from training.detectors.ssd320.postprocess import EVAL_SETTINGS, postprocess
from training.detectors.ssd320.transforms import SSD320TrainTransform
from training.detectors.task import (
    Batch,
    LoaderRequest,
    Prediction,
    TrainLoader,
    images_to,
    reject_scale_jitter,
)


class SSD320Task:
    model_name = "ssd320"

    def __init__(self, model_args: dict[str, Any]) -> None:
        self.model_args = model_args
        self.image_size = int(model_args.get("image_size", 320))
        self.anchor_config = AnchorConfig(image_size=self.image_size)
        self.anchors_xywh = generate_anchors_xywh(self.anchor_config)
        self.anchors_xyxy = generate_anchors_xyxy(self.anchor_config)
        self.post = EVAL_SETTINGS

    def build_model(self, backbone_weights: str | None = None) -> nn.Module:
        return SSD320(**self.model_args, backbone_weights=backbone_weights)

    def build_criterion(self) -> nn.Module:
        return FocalLoss(self.anchors_xywh)

    def train_loader(
        self, request: LoaderRequest, scale_jitter: tuple[float, float] | None = None
    ) -> TrainLoader:
        reject_scale_jitter(self.model_name, scale_jitter)
        from training.detectors.ssd320.dali import TF_RANDOM_CROP

        return ssd_train_loader(
            request,
            size=self.image_size,
            transforms=SSD320TrainTransform(self.image_size, request.seed),
            anchors_xyxy=self.anchors_xyxy,
            dali_options={"crop": TF_RANDOM_CROP, "color_twist": False},
        )

    def eval_loader(self, root: str, split: str, batch_size: int, workers: int) -> Iterable[Batch]:
        return build_ssd_eval_loader(
            root, split, batch_size=batch_size, workers=workers, size=self.image_size
        )

    def loss(self, model: nn.Module, criterion: nn.Module, batch: Batch, device: torch.device) -> Tensor:
        images, boxes, labels = batch
        images = images_to(images, model, device)
        box_regression, cls_logits = model(images)
        return cast(
            "Tensor",
            criterion(
                box_regression,
                cls_logits,
                boxes.to(device, non_blocking=True),
                labels.to(device, non_blocking=True),
            ),
        )

    @torch.no_grad()
    def predict(self, model: nn.Module, images: Tensor) -> list[Prediction]:
        box_regression, cls_logits = model(images)
        results = postprocess(
            box_regression, cls_logits, self.anchors_xywh.to(box_regression.device), self.post
        )
        return [cast(Prediction, r) for r in results]

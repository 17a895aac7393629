"""SSD320 export wrapper: ``(box_regression [B, A, 4], cls_logits [B, A, C])`` -> boxes and sigmoid scores.

The decoder is training's own (``training.detectors.ssd320.postprocess.decode_predictions``: Faster R-CNN
box decoding against the anchors, clipped to the image, and sigmoid); the eager reference is training's
evaluation post-processing run with the export's thresholds. Defaults are TF's for SSD320: score
threshold 1e-8, NMS IoU 0.6, 100 per class, 100 in total (pre-NMS top-k 100 per class, see
``training.detectors.ssd320.postprocess``). So a served SSD320 returns up to 100 boxes however unlikely;
callers filter with ``score_threshold`` per request, or the export sets a higher ``--score-threshold``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from training.checkpoint import Checkpoint
from training.detectors.export import ExportWrapper
from training.detectors.ssd300.transforms import (
    normalize_to_tensor,
    resize_image,
)
from training.detectors.ssd320.anchors import generate_anchors_xywh
from training.detectors.ssd320.model import SSD320
from training.detectors.ssd320.postprocess import EVAL_SETTINGS, decode_predictions, postprocess
from training.postprocess import Detections, PostprocessSettings


class SSD320Decoder(nn.Module):
    """``box_regression [B, A, 4]`` and ``cls_logits [B, A, C]`` -> ``boxes [B, A, 4]`` x1y1x2y2 (0-1)
    and ``scores [B, C, A]`` sigmoid probabilities."""

    anchors: Tensor

    def __init__(self, anchors_xywh: Tensor) -> None:
        super().__init__()
        self.register_buffer("anchors", anchors_xywh.unsqueeze(0), persistent=False)  # (1, A, 4)

    def forward(self, box_regression: Tensor, cls_logits: Tensor) -> tuple[Tensor, Tensor]:
        boxes, scores = decode_predictions(box_regression, cls_logits, self.anchors)
        return boxes, scores.transpose(1, 2)  # (B, A, C) -> (B, C, A)


class SSD320Wrapper(ExportWrapper):
    architecture = "ssd320"
    raw_output_names: ClassVar[tuple[str, ...]] = ("box_regression", "cls_logits")

    def __init__(self, checkpoint: Checkpoint, network: nn.Module) -> None:
        super().__init__(checkpoint, network)
        if not isinstance(self.network, SSD320):
            raise TypeError(f"ssd320 checkpoint built a {type(self.network).__name__}, not SSD320")
        self.image_size = self.network.image_size
        self.anchors_xywh = generate_anchors_xywh(self.network.anchors)  # (A, 4)

    @property
    def default_settings(self) -> PostprocessSettings:
        return EVAL_SETTINGS

    @property
    def num_anchors(self) -> int:
        return int(self.anchors_xywh.shape[0])

    def decoder(self) -> nn.Module:
        return SSD320Decoder(self.anchors_xywh)

    def resize(self, image: np.ndarray) -> np.ndarray:
        return np.asarray(resize_image(image, self.image_size), dtype=np.uint8)

    def normalize(self, images: np.ndarray) -> Tensor:
        return torch.stack([normalize_to_tensor(image) for image in images])

    def eager_detections(self, raw: tuple[Tensor, ...], settings: PostprocessSettings) -> list[Detections]:
        box_regression, cls_logits = raw
        return [
            # contiguous label 1..C -> label index 0..C-1
            Detections(r["boxes"].numpy(), r["scores"].numpy(), r["labels"].numpy() - 1)
            for r in postprocess(box_regression, cls_logits, self.anchors_xywh, settings)
        ]

"""SSD300 export wrapper: ``(locs [B, 4, A], confs [B, C+1, A])`` -> boxes and softmax scores.

The decoder is training's own box decoding (``training.box_ops``) and softmax; the eager reference is
training's evaluation post-processing (``training.detectors.ssd300.postprocess``) run with the export's
thresholds.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from training.box_ops import decode_boxes, xywh_to_xyxy
from training.checkpoint import Checkpoint
from training.detectors.export import ExportWrapper
from training.detectors.ssd300.default_boxes import default_boxes_xywh
from training.detectors.ssd300.loss import BOX_CODE_WEIGHTS
from training.detectors.ssd300.model import SSD300
from training.detectors.ssd300.postprocess import EVAL_SETTINGS, postprocess
from training.detectors.ssd300.transforms import (
    normalize_to_tensor,
    resize_image,
)
from training.postprocess import Detections, PostprocessSettings


class SSD300Decoder(nn.Module):
    """``locs [B, 4, A]`` codes and ``confs [B, C+1, A]`` logits -> ``boxes [B, A, 4]`` x1y1x2y2 (0-1)
    and ``scores [B, C, A]`` softmax probabilities without the background row."""

    dboxes: Tensor

    def __init__(self, dboxes_xywh: Tensor) -> None:
        super().__init__()
        self.register_buffer("dboxes", dboxes_xywh.unsqueeze(0), persistent=False)  # (1, A, 4)

    def forward(self, locs: Tensor, confs: Tensor) -> tuple[Tensor, Tensor]:
        codes = locs.transpose(1, 2)  # (B, 4, A) -> (B, A, 4)
        boxes = xywh_to_xyxy(decode_boxes(codes, self.dboxes, BOX_CODE_WEIGHTS))
        scores = confs.softmax(dim=1)[:, 1:, :]  # (B, C, A): class 0 is background
        return boxes, scores


class SSD300Wrapper(ExportWrapper):
    architecture = "ssd300"
    raw_output_names: ClassVar[tuple[str, ...]] = ("locs", "confs")

    def __init__(self, checkpoint: Checkpoint, network: nn.Module) -> None:
        super().__init__(checkpoint, network)
        if not isinstance(self.network, SSD300):
            raise TypeError(f"ssd300 checkpoint built a {type(self.network).__name__}, not SSD300")
        self.boxes_config = self.network.boxes
        self.image_size = self.boxes_config.fig_size
        self.dboxes_xywh = default_boxes_xywh(self.boxes_config)  # (A, 4)

    @property
    def default_settings(self) -> PostprocessSettings:
        # Training's evaluation thresholds, but K = 100 per image for serving (evaluation keeps 200).
        return dataclasses.replace(EVAL_SETTINGS, max_detections=100)

    @property
    def num_anchors(self) -> int:
        return int(self.dboxes_xywh.shape[0])

    def decoder(self) -> nn.Module:
        return SSD300Decoder(self.dboxes_xywh)

    def resize(self, image: np.ndarray) -> np.ndarray:
        height, width = self.input_size
        assert height == width, "SSD300 inputs are square"
        return np.asarray(resize_image(image, height), dtype=np.uint8)

    def normalize(self, images: np.ndarray) -> Tensor:
        return torch.stack([normalize_to_tensor(image) for image in images])

    def eager_detections(self, raw: tuple[Tensor, ...], settings: PostprocessSettings) -> list[Detections]:
        locs, confs = raw
        return [
            # contiguous label 1..C -> label index 0..C-1
            Detections(r["boxes"].numpy(), r["scores"].numpy(), r["labels"].numpy() - 1)
            for r in postprocess(locs, confs, self.dboxes_xywh, settings)
        ]

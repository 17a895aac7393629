"""EfficientDet post-processing (effdet's ``DetBenchPredict``), with the project's box decoding.

Per image: the top ``max_detection_points`` (5000) of all anchors x classes logits (effdet's own
``_post_process``, no score threshold) -> decode their anchors' codes and clip the boxes to the network
input -> sigmoid -> class-aware NMS at ``iou_threshold`` (0.5) -> the ``max_detections`` (100) best,
scores descending. With the defaults this equals effdet's ``_batch_detection`` given the input as the
image size (tested); the decoding is ``training.box_ops`` (the same code the exported graph runs), with
effdet's (ty, tx, th, tw) code order and no scale factors.

Clipping before NMS is what effdet does when it knows the image size, and it keeps the boxes finite: a
size code past ~89 overflows ``exp`` in float32 (a badly trained checkpoint produced codes of 119), and
NMS on infinite boxes (NaN IoU) has no defined result, so PyTorch and ONNX Runtime could keep different
boxes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torchvision.ops import batched_nms

from training.box_ops import decode_boxes, xywh_to_xyxy
from training.detectors.efficientdet.effdet_compat import post_process_topk

__all__ = [
    "BOX_CODE_WEIGHTS",
    "PostprocessConfig",
    "anchors_xywh",
    "decode_effdet_boxes",
    "detections",
    "flatten_outputs",
]

BOX_CODE_WEIGHTS = (1.0, 1.0, 1.0, 1.0)  # Faster R-CNN coding without scale factors


@dataclass(frozen=True)
class PostprocessConfig:
    max_detection_points: int = 5000
    iou_threshold: float = 0.5
    max_detections: int = 100
    score_threshold: float = 0.0  # effdet has none; exported graphs may use one


def anchors_xywh(anchor_boxes_yxyx: Tensor) -> Tensor:
    """effdet's anchors ``[A, 4]`` y1, x1, y2, x2 -> centre form (cx, cy, w, h), same pixels."""
    y1, x1, y2, x2 = anchor_boxes_yxyx.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def decode_effdet_boxes(codes_tytxthtw: Tensor, anchors_cxcywh: Tensor, image_size: int) -> Tensor:
    """Codes ``[..., 4]`` (ty, tx, th, tw) against anchors (centre form) -> x1, y1, x2, y2 pixels, clipped
    to the ``image_size`` square network input."""
    codes = codes_tytxthtw[..., [1, 0, 3, 2]]  # -> (tx, ty, tw, th), box_ops' order
    return xywh_to_xyxy(decode_boxes(codes, anchors_cxcywh, BOX_CODE_WEIGHTS)).clamp(0.0, float(image_size))


def flatten_outputs(
    class_outputs: list[Tensor], box_outputs: list[Tensor], num_classes: int
) -> tuple[Tensor, Tensor]:
    """Per-level maps -> ``logits [B, A, C]`` and ``codes [B, A, 4]``, anchors ordered level, row, column,
    anchor (the order of :func:`training.detectors.efficientdet.model.anchor_boxes`)."""
    batch = class_outputs[0].shape[0]
    # (B, 9*C, H, W) -> (B, H, W, 9*C) -> (B, H*W*9, C): channel = anchor * C + class
    logits = torch.cat([c.permute(0, 2, 3, 1).reshape(batch, -1, num_classes) for c in class_outputs], 1)
    codes = torch.cat([b.permute(0, 2, 3, 1).reshape(batch, -1, 4) for b in box_outputs], 1)
    return logits, codes


@torch.no_grad()
def detections(
    class_outputs: list[Tensor],
    box_outputs: list[Tensor],
    anchor_boxes_yxyx: Tensor,
    num_classes: int,
    image_size: int,
    cfg: PostprocessConfig | None = None,
) -> list[dict[str, Tensor]]:
    """Per image ``{"boxes": [K, 4] x1, y1, x2, y2 pixels of the square ``image_size`` input, "scores":
    [K], "labels": [K] int64 1..C}``, scores descending (see the module docstring)."""
    cfg = cfg or PostprocessConfig()
    anchors = anchors_xywh(anchor_boxes_yxyx.to(class_outputs[0].device))
    total = anchors.shape[0] * num_classes
    k = min(cfg.max_detection_points, total)
    top_logits, top_codes, anchor_idx, classes = post_process_topk(
        class_outputs,
        box_outputs,
        num_levels=len(class_outputs),
        num_classes=num_classes,
        max_detection_points=k,
    )
    results = []
    for logits, codes, idx, cls in zip(top_logits, top_codes, anchor_idx, classes, strict=True):
        boxes = decode_effdet_boxes(codes.float(), anchors[idx], image_size)
        scores = logits.float().sigmoid().squeeze(1)
        keep = batched_nms(boxes, scores, cls, cfg.iou_threshold)[: cfg.max_detections]
        keep = keep[scores[keep] > cfg.score_threshold]
        results.append({"boxes": boxes[keep], "scores": scores[keep], "labels": cls[keep].long() + 1})
    return results

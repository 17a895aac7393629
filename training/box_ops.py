"""Box formats, coding and matching shared by every detector and by the exporters.

Conventions: ``xyxy`` = (x1, y1, x2, y2), ``xywh`` = (cx, cy, w, h) (centre form, as SSD's default boxes),
``ltwh`` = (x, y, w, h) (COCO's annotation form). Tensors are ``[..., 4]`` float. IoU and format
conversions between corner forms come from ``torchvision.ops``; what it lacks is written here once.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor
from torchvision.ops import box_convert, box_iou

__all__ = [
    "box_iou",
    "decode_boxes",
    "encode_boxes",
    "ltwh_to_xyxy",
    "match_anchors",
    "xywh_to_xyxy",
    "xyxy_to_ltwh",
    "xyxy_to_xywh",
]


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """Centre form (cx, cy, w, h) -> corners (x1, y1, x2, y2)."""
    return cast("Tensor", box_convert(boxes, "cxcywh", "xyxy"))


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """Corners (x1, y1, x2, y2) -> centre form (cx, cy, w, h)."""
    return cast("Tensor", box_convert(boxes, "xyxy", "cxcywh"))


def ltwh_to_xyxy(boxes: Tensor) -> Tensor:
    """COCO (x, y, w, h) -> corners."""
    return cast("Tensor", box_convert(boxes, "xywh", "xyxy"))


def xyxy_to_ltwh(boxes: Tensor) -> Tensor:
    """Corners -> COCO (x, y, w, h)."""
    return cast("Tensor", box_convert(boxes, "xyxy", "xywh"))


def encode_boxes(
    boxes_xywh: Tensor, anchors_xywh: Tensor, weights: tuple[float, float, float, float]
) -> Tensor:
    """Regression targets of ``boxes`` relative to ``anchors`` (both centre form, broadcastable ``[..., 4]``).

    ``t_xy = w_xy * (xy - xy_a) / wh_a``, ``t_wh = w_wh * log(wh / wh_a)``. SSD300 uses weights
    (10, 10, 5, 5) (NVIDIA's scale_xy 0.1 / scale_wh 0.2 inverted); Faster R-CNN-style coders use their own.
    """
    wx, wy, ww, wh = weights
    dxy = (boxes_xywh[..., :2] - anchors_xywh[..., :2]) / anchors_xywh[..., 2:]
    dwh = torch.log(boxes_xywh[..., 2:] / anchors_xywh[..., 2:])
    scale_xy = dxy.new_tensor([wx, wy])
    scale_wh = dwh.new_tensor([ww, wh])
    return torch.cat([dxy * scale_xy, dwh * scale_wh], dim=-1)


def decode_boxes(
    codes: Tensor,
    anchors_xywh: Tensor,
    weights: tuple[float, float, float, float],
    max_log_wh: float | None = None,
) -> Tensor:
    """Inverse of :func:`encode_boxes`: regression ``codes [..., 4]`` -> boxes in centre form.

    ``max_log_wh`` clamps the size term before ``exp`` (torchvision clamps at log(1000/16)) so an
    untrained head cannot overflow.
    """
    wx, wy, ww, wh = weights
    dxy = codes[..., :2] / codes.new_tensor([wx, wy])
    dwh = codes[..., 2:] / codes.new_tensor([ww, wh])
    if max_log_wh is not None:
        dwh = dwh.clamp(max=max_log_wh)
    xy = dxy * anchors_xywh[..., 2:] + anchors_xywh[..., :2]
    wh_ = torch.exp(dwh) * anchors_xywh[..., 2:]
    return torch.cat([xy, wh_], dim=-1)


def match_anchors(gt_xyxy: Tensor, anchors_xyxy: Tensor, iou_threshold: float = 0.5) -> Tensor:
    """Assign each anchor the index of a ground-truth box, or -1 for background.

    An anchor is matched to its best ground truth when that IoU exceeds ``iou_threshold``; in addition
    every ground truth is forced onto its own best anchor (so no object goes unmatched), winning over
    threshold matches — the rule of SSD (NVIDIA) and of TF's argmax matcher with ``force_match_for_each_row``.

    Args:
        gt_xyxy: ``[M, 4]`` ground-truth boxes (any consistent unit).
        anchors_xyxy: ``[A, 4]`` anchors in the same unit.
    Returns:
        ``[A]`` int64, ground-truth index per anchor or -1.
    """
    num_anchors = anchors_xyxy.shape[0]
    if gt_xyxy.numel() == 0:
        return torch.full((num_anchors,), -1, dtype=torch.int64, device=anchors_xyxy.device)
    iou = box_iou(gt_xyxy, anchors_xyxy)  # (M, A)
    best_iou, best_gt = iou.max(dim=0)  # per anchor
    matches = torch.where(best_iou > iou_threshold, best_gt, torch.full_like(best_gt, -1))
    # Force-match: each ground truth takes its best anchor. Later ground truths win ties, as in NVIDIA's code.
    best_anchor = iou.argmax(dim=1)  # (M,)
    matches[best_anchor] = torch.arange(gt_xyxy.shape[0], device=matches.device)
    return matches

"""Training targets for SSD300: match ground truth to default boxes (the DALI ``box_encoder`` contract)."""

from __future__ import annotations

import torch
from torch import Tensor

from training.box_ops import match_anchors, xyxy_to_xywh


def assign_targets(
    gt_xyxy: Tensor, gt_labels: Tensor, dboxes_xyxy: Tensor, iou_threshold: float = 0.5
) -> tuple[Tensor, Tensor]:
    """Per default box: the matched ground-truth box and its label (0 = background).

    Args:
        gt_xyxy: ``[M, 4]`` float boxes normalized to 0-1, corner form.
        gt_labels: ``[M]`` int64 contiguous labels, 1..C.
        dboxes_xyxy: ``[A, 4]`` default boxes, corner form.
    Returns:
        ``boxes [A, 4]`` centre form (unmatched rows hold the default box itself, as NVIDIA's encoder) and
        ``labels [A]`` int64.
    """
    matches = match_anchors(gt_xyxy, dboxes_xyxy, iou_threshold)
    matched = matches >= 0
    boxes = dboxes_xyxy.clone()
    labels = torch.zeros(dboxes_xyxy.shape[0], dtype=torch.int64, device=dboxes_xyxy.device)
    if gt_xyxy.numel():
        boxes[matched] = gt_xyxy[matches[matched]].to(boxes.dtype)
        labels[matched] = gt_labels[matches[matched]].to(torch.int64)
    return xyxy_to_xywh(boxes), labels

"""SSD300 evaluation post-processing: decode, softmax, per-class filter + top-k, NMS (torchvision)."""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.ops import nms

from training.box_ops import decode_boxes, xywh_to_xyxy
from training.detectors.ssd300.loss import BOX_CODE_WEIGHTS
from training.postprocess import PostprocessSettings

# Training's evaluation settings (NVIDIA's): 200 candidates per class, 200 detections per image.
EVAL_SETTINGS = PostprocessSettings(
    score_threshold=0.05, iou_threshold=0.5, topk_per_class=200, max_detections=200
)


def decode_predictions(locs: Tensor, confs: Tensor, dboxes_xywh: Tensor) -> tuple[Tensor, Tensor]:
    """``locs [N, 4, A]``, ``confs [N, C+1, A]`` -> ``boxes [N, A, 4]`` xyxy (0-1), ``probs [N, A, C+1]``."""
    boxes = xywh_to_xyxy(decode_boxes(locs.transpose(1, 2).float(), dboxes_xywh, BOX_CODE_WEIGHTS))
    return boxes, confs.float().softmax(dim=1).transpose(1, 2)


def postprocess(
    locs: Tensor, confs: Tensor, dboxes_xywh: Tensor, cfg: PostprocessSettings = EVAL_SETTINGS
) -> list[dict[str, Tensor]]:
    """Per image ``{"boxes": [K, 4] xyxy normalized, "scores": [K], "labels": [K] int64 (1..C)}``.

    Background (class 0) is skipped; per class the scores above ``score_threshold`` keep their top
    ``topk_per_class``; NMS runs per class; the best ``max_detections`` survive, scores descending.
    NMS runs class by class rather than through ``batched_nms``: its coordinate-offset trick adds
    ``class x max coordinate`` to every box, and a young model's boxes (size codes are not clamped before
    ``exp``, as in NVIDIA's reference) can be 1e15 wide, which rounds small boxes' IoU to nonsense.
    """
    boxes, probs = decode_predictions(locs, confs, dboxes_xywh)
    results = []
    for img_boxes, img_probs in zip(boxes, probs, strict=True):
        scores = img_probs[:, 1:]  # (A, C)
        keep_boxes, keep_scores, keep_labels = [], [], []
        for cls in range(scores.shape[1]):
            cls_scores = scores[:, cls]
            idx = torch.nonzero(cls_scores > cfg.score_threshold).squeeze(1)
            if idx.numel() > cfg.topk_per_class:
                idx = idx[cls_scores[idx].topk(cfg.topk_per_class).indices]
            idx = idx[nms(img_boxes[idx], cls_scores[idx], cfg.iou_threshold)]
            keep_boxes.append(img_boxes[idx])
            keep_scores.append(cls_scores[idx])
            keep_labels.append(torch.full_like(idx, cls + 1))
        cand_scores = torch.cat(keep_scores)
        keep = cand_scores.argsort(descending=True, stable=True)[: cfg.max_detections]
        results.append(
            {
                "boxes": torch.cat(keep_boxes)[keep],
                "scores": cand_scores[keep],
                "labels": torch.cat(keep_labels)[keep],
            }
        )
    return results

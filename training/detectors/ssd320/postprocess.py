"""SSD320 post-processing: decode, sigmoid, per-class top-k, per-class NMS, best K (TF's settings).

TF's ``batch_non_max_suppression`` for SSD320: sigmoid scores, boxes clipped to the image, score
threshold 1e-8, NMS IoU 0.6, at most 100 per class and 100 in total. Here each class first keeps its
``topk_per_class`` best anchors (TF runs NMS over every anchor above the threshold, ~12,800 per class,
and keeps 100 survivors; bounding NMS's input is what keeps the exported graph cheap, see
``exporters.onnx.postprocess_graph``), so a class keeps at most 100 survivors of its 100 best candidates.
The exported graph (``training.detectors.ssd320.export``) computes exactly this function.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchvision.ops import batched_nms

from training.box_ops import decode_boxes, xywh_to_xyxy
from training.detectors.ssd320.loss import BOX_CODE_WEIGHTS
from training.postprocess import PostprocessSettings

# Size codes are clamped before exp (torchvision's bound, log(1000 / 16)) so an untrained head cannot
# overflow; trained models never come near it.
MAX_LOG_WH = math.log(1000.0 / 16)


# TF's post-processing (the NVIDIA SSD320 config): sigmoid scores, 100 per class, NMS at 0.6, 100 per image.
EVAL_SETTINGS = PostprocessSettings(
    score_threshold=1e-8, iou_threshold=0.6, topk_per_class=100, max_detections=100
)


def decode_predictions(
    box_regression: Tensor, cls_logits: Tensor, anchors_xywh: Tensor
) -> tuple[Tensor, Tensor]:
    """Codes ``[N, A, 4]`` and logits ``[N, A, C]`` -> boxes ``[N, A, 4]`` x1y1x2y2 in 0-1 and scores
    ``[N, A, C]`` (sigmoid)."""
    centre = decode_boxes(box_regression.float(), anchors_xywh, BOX_CODE_WEIGHTS, max_log_wh=MAX_LOG_WH)
    return xywh_to_xyxy(centre).clamp(0.0, 1.0), cls_logits.float().sigmoid()


def postprocess(
    box_regression: Tensor, cls_logits: Tensor, anchors_xywh: Tensor, cfg: PostprocessSettings = EVAL_SETTINGS
) -> list[dict[str, Tensor]]:
    """Per image ``{"boxes": [K, 4] xyxy normalized, "scores": [K], "labels": [K] int64 (1..C)}``.

    Per class the ``topk_per_class`` best anchors with score > ``score_threshold`` are candidates; NMS
    runs per class; the best ``max_detections`` survivors are returned, scores descending.
    """
    boxes, scores = decode_predictions(box_regression, cls_logits, anchors_xywh)
    num_anchors, num_classes = scores.shape[1:]
    k = min(cfg.topk_per_class, num_anchors)
    classes = torch.arange(num_classes, device=scores.device).unsqueeze(1).expand(num_classes, k)
    results = []
    for img_boxes, img_scores in zip(boxes, scores, strict=True):
        top_scores, top_idx = img_scores.t().topk(k, dim=1)  # (C, k) each, per class
        keep = top_scores > cfg.score_threshold
        cand_boxes = img_boxes[top_idx[keep]]
        cand_scores = top_scores[keep]
        cand_labels = classes[keep]
        kept = batched_nms(cand_boxes, cand_scores, cand_labels, cfg.iou_threshold)[: cfg.max_detections]
        results.append(
            {"boxes": cand_boxes[kept], "scores": cand_scores[kept], "labels": cand_labels[kept] + 1}
        )
    return results

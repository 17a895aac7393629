"""Detection post-processing written in torch ops that export to a cheap ONNX graph around NonMaxSuppression.

Every architecture's export wrapper produces the common layout, and this module turns it into the output
contract of ``contract.manifest`` (the TensorRT NMS-plugin layout):

    in:  boxes  float32 [B, A, 4]  x1, y1, x2, y2 normalized to the network input, one box per anchor
                 (or [B, C, A, 4]: one box per anchor and class, as Mask R-CNN's box head predicts)
         scores float32 [B, C, A]  per-class probabilities (background already removed)
    out: num_detections    int32   [B, 1]
         detection_boxes   float32 [B, K, 4]   rows >= num_detections are zero
         detection_scores  float32 [B, K]      descending; padding rows are zero
         detection_classes int32   [B, K]      class index 0..C-1; padding rows are zero

Semantics (identical to ``training.detectors.ssd300.postprocess.postprocess`` for the same settings):
per image and class, candidates with score > ``score_threshold`` keep their top ``topk_per_class``;
greedy NMS (suppress IoU > ``iou_threshold``) runs per class; the ``max_detections`` best survivors
across classes are returned, scores descending.

With ``pre_nms_topk`` set (EfficientDet / RetinaNet-style, as effdet's ``DetBenchPredict``), the
candidates are instead the ``pre_nms_topk`` best (anchor, class) scores over all classes together (then
the score threshold); NMS is still per class (class-aware), on those candidates only. With that
global TopK, ``scores`` may also be per-class logits of a sigmoid (``logits=True``): the TopK then runs
over the logits, masked at the threshold's logit, and the sigmoid over its ``pre_nms_topk`` values only
(EfficientDet-D0 at 256: 3,000 instead of 73,656; the same candidates and scores, except that logits
whose sigmoids round to one float32 value keep their logits' order instead of tying).

Why it stays cheap (a naive export spent ~90% of its time in NMS, see reference/measured-here.md):
the per-class TopK bounds NonMaxSuppression's input to ``topk_per_class`` boxes per (image, class) (with
``pre_nms_topk``: to ``pre_nms_topk`` boxes per image, each scored only in its own class's row), and
candidates at or below the score threshold are masked to -1 so NonMaxSuppression drops them before it
sorts. Each (image, class) pair is its own NonMaxSuppression "batch" of ``topk_per_class`` boxes, so the
classes never interact and no coordinate-offset trick (which costs float precision) is needed. A
ScatterND turns the selected indices back into a dense score mask and one TopK picks the final K.
All ops are in TensorRT's ONNX parser (TopK's K is a constant < 3840 as TensorRT requires).

Measured (``detect-bench backend --breakdown``: the artifact cut at its raw heads, both halves timed in
ONNX Runtime, 2 shared CPU cores): a trained 6-class ResNet-18 SSD300 spends 1.3-1.8% of the network's
time in post-processing (batch 1-8); the worst case, an untrained 80-class ResNet-50 SSD300 (every
class above the threshold at thousands of anchors, so 80 x 200 boxes reach NMS), 3.2-3.5%. About half
of that is the per-class TopK (its cost grows with ``topk_per_class``), a fifth NonMaxSuppression. So
ONNX Runtime's NMS stays in the graph; the backend needs no NMS of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from training.postprocess import TENSORRT_MAX_TOPK, PostprocessSettings, non_max_suppression

__all__ = [
    "TENSORRT_MAX_TOPK",
    "CandidateDecode",
    "DetectionPostprocess",
    "PostprocessSettings",
    "non_max_suppression",
]

# codes [B, N, 4] of candidates at anchor_index [B, N] -> boxes [B, N, 4] (see DetectionPostprocess.forward)
CandidateDecode = Callable[[Tensor, Tensor], Tensor]


class DetectionPostprocess(nn.Module):
    """Common layout -> output contract (see the module docstring); exports to ONNX with dynamic batch.

    ``num_classes`` (C) and ``num_anchors`` (A) are fixed per exported model; passing them here keeps
    every reshape static except the batch dimension.
    """

    def __init__(
        self, settings: PostprocessSettings, num_classes: int, num_anchors: int, logits: bool = False
    ) -> None:
        super().__init__()
        if logits and settings.pre_nms_topk is None:
            raise ValueError("logits need the global pre-NMS TopK (pre_nms_topk)")
        self.settings = settings
        # Scores are the logits of a sigmoid: the sigmoid runs on the TopK's candidates only.
        self.logits = logits
        self.num_classes = num_classes
        self.num_anchors = num_anchors
        if settings.pre_nms_topk is None:
            self.k = min(settings.topk_per_class, num_anchors)  # candidates per (image, class)
            self.max_det = min(settings.max_detections, num_classes * self.k)  # K before padding
        else:
            self.k = min(settings.pre_nms_topk, num_classes * num_anchors)  # candidates per image
            self.max_det = min(settings.max_detections, self.k)

    def forward(
        self, boxes: Tensor, scores: Tensor, decode: CandidateDecode | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``boxes [B, A, 4]`` (one box per anchor) or ``[B, C, A, 4]`` (class-specific, e.g. Mask R-CNN's
        box head), ``scores [B, C, A]`` -> the output contract.

        With ``decode``, ``boxes`` are per-anchor box codes ``[B, A, 4]`` and ``decode(codes [B, N, 4],
        anchor_index [B, N])`` turns the gathered candidates' codes into boxes: per-anchor decoding on the
        candidates only, the same boxes for a fraction of the work. With ``logits`` (constructor),
        ``scores`` are the logits whose sigmoid is the score: the sigmoid runs on the candidates only."""
        if decode is not None and boxes.dim() == 4:
            raise ValueError("decode needs one box code per anchor [B, A, 4], not class-specific boxes")
        if self.settings.pre_nms_topk is not None:
            if boxes.dim() == 4:
                raise ValueError("pre_nms_topk needs one box per anchor [B, A, 4], not class-specific boxes")
            return self._forward_global_topk(boxes, scores, decode)
        return self._forward_per_class(boxes, scores, decode)

    def _forward_per_class(
        self, boxes: Tensor, scores: Tensor, decode: CandidateDecode | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Candidates: per (image, class) the ``k`` best anchors, NMS per class among them."""
        s, num_classes, k = self.settings, self.num_classes, self.k

        # Pre-NMS: per (image, class) the k best anchors; at or below the threshold -> -1 (never selected).
        top_scores, top_idx = scores.topk(k, dim=2)  # (B, C, k), sorted descending
        top_scores = torch.where(
            top_scores > s.score_threshold, top_scores, torch.full_like(top_scores, -1.0)
        )
        if boxes.dim() == 4:  # class-specific: (B, C, A, 4) -> (B, C, k, 4) -> (B, C*k, 4), class-major
            cand_boxes = boxes.gather(2, top_idx.unsqueeze(3).expand(-1, -1, -1, 4))
            cand_boxes = cand_boxes.reshape(-1, num_classes * k, 4)
        else:  # (B, C, k) -> (B, C*k, 1) -> (B, C*k, 4): the candidate boxes, class-major
            cand_anchors = top_idx.reshape(-1, num_classes * k)
            cand_boxes = boxes.gather(1, cand_anchors.unsqueeze(2).expand(-1, -1, 4))
            if decode is not None:
                cand_boxes = decode(cand_boxes, cand_anchors)

        # Each (image, class) is one NMS group of k boxes: (B*C, k, 4) and (B*C, 1, k).
        selected = non_max_suppression(
            cand_boxes.reshape(-1, k, 4),
            top_scores.reshape(-1, 1, k),
            max_per_group=k,
            iou_threshold=s.iou_threshold,
            # Candidates are > score_threshold >= 0 or masked to -1: 0 separates them whether a runtime
            # compares with > or >=.
            score_threshold=0.0,
        )
        flat = selected[:, 0] * k + selected[:, 2]  # index into the (B*C*k) candidates
        flat_scores = top_scores.reshape(-1)
        kept = torch.full_like(flat_scores, -1.0).index_put((flat,), flat_scores[flat])  # ScatterND
        kept = kept.reshape(-1, num_classes * k)  # (B, C*k), -1 where not kept

        det_scores, det_idx = kept.topk(self.max_det, dim=1)  # (B, K')
        det_boxes = cand_boxes.gather(1, det_idx.unsqueeze(2).expand(-1, -1, 4))
        det_classes = torch.div(det_idx, k, rounding_mode="trunc")  # indices are >= 0: one integer Div
        return self._padded(det_scores, det_boxes, det_classes)

    def _forward_global_topk(
        self, boxes: Tensor, scores: Tensor, decode: CandidateDecode | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Candidates: the ``k`` best (anchor, class) scores of each image, NMS per class among them."""
        s, num_classes, num_anchors, k = self.settings, self.num_classes, self.num_anchors, self.k
        flat = scores.reshape(-1, num_classes * num_anchors)  # (B, C*A), class-major
        # At or below the threshold -> a constant BEFORE the TopK: the same candidates above it, in the same
        # order, and the TopK over mostly equal values runs ~10x faster in OpenVINO (EfficientDet-D0 at
        # 256: 3,000 of 73,656 scores, ~10% of the INT8 graph's time before, ~1% after).
        threshold, fill = (s.score_threshold, -1.0)
        if self.logits:  # sigmoid(x) > t <=> x > log(t / (1 - t)); the sigmoid then runs on the k kept only
            threshold, fill = (logit(s.score_threshold), torch.finfo(torch.float32).min)
        flat = torch.where(flat > threshold, flat, torch.full_like(flat, fill))
        top_scores, top_idx = flat.topk(k, dim=1)  # (B, k), sorted descending; masked rows are never kept
        if self.logits:
            top_scores = torch.where(
                top_scores > threshold, top_scores.sigmoid(), torch.full_like(top_scores, -1.0)
            )
        classes = torch.div(top_idx, num_anchors, rounding_mode="trunc")  # (B, k)
        anchors = top_idx - classes * num_anchors
        cand_boxes = boxes.gather(1, anchors.unsqueeze(2).expand(-1, -1, 4))  # (B, k, 4)
        if decode is not None:
            cand_boxes = decode(cand_boxes, anchors)
        # Class-aware NMS over one box set: each candidate scores only in its own class's row (B, C, k).
        class_ids = torch.arange(num_classes, device=scores.device).reshape(1, num_classes, 1)
        own_class = classes.unsqueeze(1) == class_ids
        nms_scores = torch.where(
            own_class, top_scores.unsqueeze(1), torch.full_like(own_class, -1.0, dtype=top_scores.dtype)
        )
        selected = non_max_suppression(
            cand_boxes, nms_scores, max_per_group=k, iou_threshold=s.iou_threshold, score_threshold=0.0
        )
        flat_sel = selected[:, 0] * k + selected[:, 2]  # index into the (B*k) candidates
        flat_scores = top_scores.reshape(-1)
        kept = torch.full_like(flat_scores, -1.0).index_put((flat_sel,), flat_scores[flat_sel])  # ScatterND
        det_scores, det_idx = kept.reshape(-1, k).topk(self.max_det, dim=1)  # (B, K')
        det_boxes = cand_boxes.gather(1, det_idx.unsqueeze(2).expand(-1, -1, 4))
        det_classes = classes.gather(1, det_idx)
        return self._padded(det_scores, det_boxes, det_classes)

    def _padded(
        self, det_scores: Tensor, det_boxes: Tensor, det_classes: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Zero the rows that are not detections (score -1) and pad to ``max_detections`` rows."""
        s = self.settings
        valid = det_scores >= 0.0
        det_scores = torch.where(valid, det_scores, torch.zeros_like(det_scores))
        det_boxes = torch.where(valid.unsqueeze(2), det_boxes, torch.zeros_like(det_boxes))
        det_classes = torch.where(valid, det_classes, torch.zeros_like(det_classes))
        num_detections = valid.sum(dim=1, keepdim=True)
        pad = s.max_detections - self.max_det
        if pad > 0:  # fewer candidates than K (few classes, small top-k): pad to the contract's fixed K
            # Concatenated zeros rather than F.pad, whose export is a reversed Slice the exporter warns about.
            det_boxes = torch.cat([det_boxes, torch.zeros_like(det_boxes[:, :1]).expand(-1, pad, -1)], dim=1)
            det_scores = torch.cat([det_scores, torch.zeros_like(det_scores[:, :1]).expand(-1, pad)], dim=1)
            det_classes = torch.cat(
                [det_classes, torch.zeros_like(det_classes[:, :1]).expand(-1, pad)], dim=1
            )
        return num_detections.to(torch.int32), det_boxes, det_scores, det_classes.to(torch.int32)


def logit(probability: float) -> float:
    """The logit whose sigmoid is ``probability`` (a score threshold in [0, 1)); float32's lowest value
    for 0, which every logit exceeds."""
    if probability <= 0.0:
        return float(torch.finfo(torch.float32).min)
    return math.log(probability / (1.0 - probability))

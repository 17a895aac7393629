"""The recommended display threshold: the score above which boxes are worth drawing for a person.

The artifact's own ``score_threshold`` (0.05 for SSD300) is the COCO-evaluation setting: AP rewards
keeping every low-scoring guess, so a boxed image shows 20-30 boxes for 3-5 objects. The display
threshold is the **F1-optimal score threshold** on a validation split: every detection of the model
(through the artifact in ONNX Runtime, boxes in original pixels) is matched to the ground truth at IoU
0.5, COCO's way per image and category (highest score first, each to the unmatched ground-truth box it
overlaps most, crowd boxes ignored), then **all classes are pooled** into one list sorted by score; the
threshold sits at the cut that maximises F1 = 2PR / (P + R) over that list (cuts only between
different scores; the value is a short number between the last kept and the first dropped score).
One number for all classes, because the service applies one ``score_threshold``; per-class thresholds
would fit the few validation objects of each class too closely.

It is stored in the manifest as ``display_score_threshold`` (details in ``metrics.display_threshold``);
the service uses it when a request gives no ``score_threshold``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO


@dataclass(frozen=True)
class DisplayThreshold:
    """The F1-optimal cut: ``threshold`` (keep scores >= it) and the pooled precision, recall and F1 there."""

    threshold: float
    f1: float
    precision: float
    recall: float
    true_positives: int
    detections_kept: int
    detections: int
    ground_truth: int
    iou: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def match_at_iou(
    coco_gt: COCO, results: list[dict[str, Any]], iou: float = 0.5
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(scores, is_true_positive)`` of every result, and the number of non-crowd ground-truth boxes.

    Per image and category, results are taken by descending score and each is matched to the unmatched
    non-crowd ground-truth box it overlaps most with IoU >= ``iou`` (COCO's matching at one threshold).
    """
    by_key: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in results:
        by_key.setdefault((int(r["image_id"]), int(r["category_id"])), []).append(r)
    image_ids = sorted({int(r["image_id"]) for r in results} | set(coco_gt.getImgIds()))
    gt_anns = [a for a in coco_gt.loadAnns(coco_gt.getAnnIds(imgIds=image_ids)) if not a.get("iscrowd", 0)]
    gt_by_key: dict[tuple[int, int], list[list[float]]] = {}
    for a in gt_anns:
        gt_by_key.setdefault((int(a["image_id"]), int(a["category_id"])), []).append(list(a["bbox"]))
    scores: list[float] = []
    hits: list[bool] = []
    for key, dets in by_key.items():
        dets = sorted(dets, key=lambda r: -float(r["score"]))
        gts = gt_by_key.get(key, [])
        ious = (
            np.asarray(mask_utils.iou([d["bbox"] for d in dets], gts, [0] * len(gts)))
            if gts
            else np.zeros((len(dets), 0))
        )
        taken = np.zeros(len(gts), dtype=bool)
        for i, det in enumerate(dets):
            candidates = np.where(~taken & (ious[i] >= iou), ious[i], -1.0) if gts else np.zeros(0)
            hit = bool(candidates.size and candidates.max() >= 0)
            if hit:
                taken[int(candidates.argmax())] = True
            scores.append(float(det["score"]))
            hits.append(hit)
    return np.asarray(scores, dtype=np.float64), np.asarray(hits, dtype=bool), len(gt_anns)


def f1_optimal_threshold(coco_gt: COCO, results: list[dict[str, Any]], iou: float = 0.5) -> DisplayThreshold:
    """The pooled F1-optimal score threshold of ``results`` (COCO results format) against ``coco_gt``.

    Raises:
        ValueError: no ground truth or no detection to choose from.
    """
    scores, hits, num_gt = match_at_iou(coco_gt, results, iou)
    if num_gt == 0 or scores.size == 0:
        raise ValueError(
            f"cannot choose a display threshold from {scores.size} detections and {num_gt} ground-truth boxes"
        )
    order = np.argsort(-scores, kind="stable")
    scores, hits = scores[order], hits[order]
    tp = np.cumsum(hits)
    kept = np.arange(1, scores.size + 1)
    precision, recall = tp / kept, tp / num_gt
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(tp > 0, 2 * precision * recall / (precision + recall), 0.0)
    # A cut can only fall where the next score is lower: equal scores are kept or dropped together.
    valid = np.append(scores[1:] < scores[:-1], True)
    best = int(np.flatnonzero(valid)[np.argmax(f1[valid])])
    return DisplayThreshold(
        threshold=_between(float(scores[best]), float(scores[best + 1]) if best + 1 < scores.size else 0.0),
        f1=float(f1[best]),
        precision=float(precision[best]),
        recall=float(recall[best]),
        true_positives=int(tp[best]),
        detections_kept=best + 1,
        detections=int(scores.size),
        ground_truth=num_gt,
        iou=iou,
    )


def _between(kept: float, dropped: float) -> float:
    """A short number in ``(dropped, kept]``: the midpoint, rounded to 4 decimals when that stays inside
    (scores pass through JSON rounding and float32, so the cut is not placed on a score itself)."""
    middle = (kept + dropped) / 2
    short = round(middle, 4)
    return short if dropped < short <= kept else middle

"""Comparing an exported graph's outputs with a reference: raw tensors, the output contract, detections.

Detections are matched, not compared row by row: two runtimes may order equal scores differently (and
a young model has many equal scores, often exactly 1.0), which legitimately swaps rows, or swaps which of
several tied candidates survives NMS or the cut at K. A detection left unmatched counts as *explained*
when its score lies within the score tolerance of the score threshold or of either side's last kept
score when that side holds K rows (the cut at K), or when the other side has an unmatched detection of
the same class and score that overlaps it by more than the NMS IoU (NMS kept the other of two tied
boxes), or when the other side has an explained unmatched detection of the same class, a score at least
as high and an overlap above the NMS IoU (the box that suppressed it on that side exists only there, so
a tie decided it: NMS cascades from one swapped tie). Anything else is a real disagreement.

Box coordinates are compared relative to their magnitude (``|a - b| <= tol * max(1, |a|, |b|)``):
a young model's size codes overflow ``exp`` and decode to boxes millions of input widths wide (or
infinite), where float32 itself carries errors far above any absolute tolerance. Non-finite coordinates
must be equal (the same infinity). Arithmetic on such boxes runs in float64 without numpy warnings.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from contract.manifest import MASK_OUTPUT
from training.postprocess import Detections

__all__ = [
    "Detections",
    "box_errors",
    "contract_problems",
    "mask_errors",
    "match_detections",
    "raw_errors",
    "summarize_matches",
]

_DTYPES = {
    "num_detections": np.int32,
    "detection_boxes": np.float32,
    "detection_scores": np.float32,
    "detection_classes": np.int32,
    MASK_OUTPUT: np.float32,
}


def raw_errors(reference: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    """``max_abs_error`` and ``max_rel_error`` (max abs error / max |reference|) of two same-shape arrays.

    Equal non-finite values count as no error; a non-finite value on one side only (an FP16 overflow,
    say) is an infinite error. The scale is the largest finite |reference|.
    """
    if reference.shape != actual.shape:
        raise ValueError(f"shape mismatch: reference {reference.shape}, actual {actual.shape}")
    ref, got = reference.astype(np.float64), actual.astype(np.float64)
    finite = np.isfinite(ref) & np.isfinite(got)
    same = (ref == got) | (np.isnan(ref) & np.isnan(got))
    with np.errstate(all="ignore"):
        diff = np.where(finite, np.abs(ref - got), np.where(same, 0.0, np.inf))
    finite_ref = np.abs(ref[np.isfinite(ref)])
    scale = float(finite_ref.max()) if finite_ref.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    return {"max_abs_error": max_abs, "max_rel_error": max_abs / scale if scale > 0 else max_abs}


def contract_problems(outputs: dict[str, np.ndarray], batch: int, max_detections: int) -> list[str]:
    """Every way ``outputs`` break the output contract (names, dtypes, shapes, ordering, padding)."""
    problems = []
    expected = {
        "num_detections": (batch, 1),
        "detection_boxes": (batch, max_detections, 4),
        "detection_scores": (batch, max_detections),
        "detection_classes": (batch, max_detections),
    }
    masks = outputs.get(MASK_OUTPUT)
    if masks is not None:  # mask models: [B, K, Mh, Mw] probabilities
        expected[MASK_OUTPUT] = (batch, max_detections, *masks.shape[2:])
        if masks.ndim != 4:
            problems.append(f"{MASK_OUTPUT} has shape {masks.shape}, expected [B, K, Mh, Mw]")
    for name in expected:
        if name not in outputs:
            problems.append(f"missing output {name}")
            continue
        value = outputs[name]
        if value.dtype != _DTYPES[name]:
            problems.append(f"{name} has dtype {value.dtype}, expected {np.dtype(_DTYPES[name])}")
        if value.shape != expected[name]:
            problems.append(f"{name} has shape {value.shape}, expected {expected[name]}")
    if problems:
        return problems
    if masks is not None and (not np.isfinite(masks).all() or masks.min() < 0 or masks.max() > 1):
        problems.append(f"{MASK_OUTPUT} holds values outside [0, 1]")
    for i, n in enumerate(outputs["num_detections"].reshape(-1).tolist()):
        scores = outputs["detection_scores"][i]
        if not 0 <= n <= max_detections:
            problems.append(f"image {i}: num_detections {n} outside 0..{max_detections}")
            continue
        if np.any(np.diff(scores[:n]) > 0):
            problems.append(f"image {i}: scores are not descending")
        padding = [scores[n:], outputs["detection_boxes"][i, n:], outputs["detection_classes"][i, n:]]
        if masks is not None:
            padding.append(masks[i, n:])
        if any(np.any(p != 0) for p in padding):
            problems.append(f"image {i}: rows after num_detections ({n}) are not zero")
    return problems


def _finite64(boxes: np.ndarray) -> np.ndarray:
    """float64 copy with infinities replaced by +-1e150 (products stay finite) and NaN by 0."""
    return np.nan_to_num(boxes.astype(np.float64), nan=0.0, posinf=1e150, neginf=-1e150)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one x1y1x2y2 box with ``boxes [N, 4]`` (float64; huge or infinite boxes allowed)."""
    box, boxes = _finite64(box), _finite64(boxes)
    lt = np.maximum(box[:2], boxes[:, :2])
    rb = np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    area = np.prod(np.clip(box[2:] - box[:2], 0, None))
    areas = np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=1)
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def box_errors(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Per row of ``boxes [N, 4]``: the largest coordinate error against ``box [4]``, relative to
    ``max(1, |a|, |b|)`` (absolute for normalized boxes); 0 where both are the same non-finite value,
    inf where only one is finite or they are different non-finite values."""
    a, b = boxes.astype(np.float64), box.astype(np.float64)[None, :]
    both_finite = np.isfinite(a) & np.isfinite(b)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(all="ignore"):
        scale = np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
        err = np.where(both_finite, np.abs(a - b) / scale, np.where(same, 0.0, np.inf))
    return cast("np.ndarray", err.max(axis=1, initial=0.0))


def match_detections(
    reference: Detections,
    actual: Detections,
    *,
    box_tol: float,
    score_tol: float,
    score_threshold: float,
    iou_threshold: float,
    max_detections: int,
) -> dict[str, Any]:
    """Greedy one-to-one matching (same class, score within ``score_tol`` and every box coordinate
    within ``box_tol`` relative to its magnitude, see :func:`box_errors`).

    Returns counts (``reference``, ``actual``, ``matched``, ``unexplained``, see the module docstring),
    the largest box and score errors over matched pairs, and the pairs themselves (``pairs``: (reference
    row, actual row); :func:`summarize_matches` leaves them out).
    """
    used = np.zeros(len(reference.scores), dtype=bool)
    matched_actual = np.zeros(len(actual.scores), dtype=bool)
    box_err = score_err = 0.0
    pairs: list[tuple[int, int]] = []
    for i in range(len(actual.scores)):
        errors = box_errors(reference.boxes, actual.boxes[i])
        candidates = np.flatnonzero(
            ~used
            & (reference.classes == actual.classes[i])
            & (np.abs(reference.scores - actual.scores[i]) <= score_tol)
            & (errors <= box_tol)
        )
        if candidates.size:
            j = candidates[np.argmin(np.abs(reference.scores[candidates] - actual.scores[i]))]
            used[j] = matched_actual[i] = True
            pairs.append((int(j), int(i)))
            box_err = max(box_err, float(errors[j]))
            score_err = max(score_err, float(abs(reference.scores[j] - actual.scores[i])))
    boundaries = [score_threshold]
    for side in (reference, actual):
        if len(side.scores) == max_detections and len(side.scores):
            boundaries.append(float(side.scores.min()))

    sides = ((reference, ~used), (actual, ~matched_actual))
    explained = [np.zeros(len(d.scores), dtype=bool) for d, _ in sides]
    for k, (dets, left) in enumerate(sides):
        others, others_left = sides[1 - k]
        for row in np.flatnonzero(left):
            score = float(dets.scores[row])
            tied = (
                others_left
                & (others.classes == dets.classes[row])
                & (np.abs(others.scores - score) <= score_tol)
            )
            explained[k][row] = any(abs(b - score) <= score_tol for b in boundaries) or bool(
                np.any(_iou(dets.boxes[row], others.boxes[tied]) > iou_threshold - 1e-6)
            )
    changed = True
    while changed:  # NMS cascades: suppressed on one side by an explained box only that side kept
        changed = False
        for k, (dets, left) in enumerate(sides):
            others, _ = sides[1 - k]
            for row in np.flatnonzero(left & ~explained[k]):
                suppressors = (
                    explained[1 - k]
                    & (others.classes == dets.classes[row])
                    & (others.scores >= dets.scores[row] - score_tol)
                )
                if np.any(_iou(dets.boxes[row], others.boxes[suppressors]) > iou_threshold - 1e-6):
                    explained[k][row] = changed = True
    unexplained = sum(int((left & ~done).sum()) for (_, left), done in zip(sides, explained, strict=True))
    return {
        "reference": len(reference.scores),
        "actual": len(actual.scores),
        "matched": int(used.sum()),
        "unexplained": int(unexplained),
        "max_box_error": box_err,
        "max_score_error": score_err,
        "pairs": pairs,
    }


def mask_errors(
    reference: list[Detections], actual: list[Detections], matches: list[dict[str, Any]]
) -> dict[str, Any]:
    """Matched detections' masks: the largest probability difference, and the smallest IoU of the masks
    thresholded at 0.5 (both in the low-resolution box frame) with how many pairs fall below 0.9."""
    max_abs, min_iou, below, pairs = 0.0, 1.0, 0, 0
    for ref, got, match in zip(reference, actual, matches, strict=True):
        if ref.masks is None or got.masks is None:
            continue
        for i, j in match["pairs"]:
            a, b = ref.masks[i], got.masks[j]
            max_abs = max(max_abs, float(np.abs(a.astype(np.float64) - b).max(initial=0.0)))
            union = np.logical_or(a > 0.5, b > 0.5).sum()
            iou = float(np.logical_and(a > 0.5, b > 0.5).sum() / union) if union else 1.0
            min_iou, below, pairs = min(min_iou, iou), below + (iou < 0.9), pairs + 1
    return {"pairs": pairs, "max_abs_error": max_abs, "min_iou": min_iou, "pairs_iou_below_0.9": below}


def summarize_matches(per_image: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over images of :func:`match_detections` results."""
    return {
        "images": len(per_image),
        "reference": sum(m["reference"] for m in per_image),
        "actual": sum(m["actual"] for m in per_image),
        "matched": sum(m["matched"] for m in per_image),
        "unexplained": sum(m["unexplained"] for m in per_image),
        "max_box_error": max((m["max_box_error"] for m in per_image), default=0.0),
        "max_score_error": max((m["max_score_error"] for m in per_image), default=0.0),
    }


class Agreement:
    """Raw-output errors and matched detections of a graph against a reference, accumulated over batches
    (the largest error per raw output; one match per image)."""

    def __init__(self, raw_names: list[str]) -> None:
        self.raw_outputs = {n: {"max_abs_error": 0.0, "max_rel_error": 0.0} for n in raw_names}
        self.matches: list[dict[str, Any]] = []
        self.references: list[Detections] = []
        self.actuals: list[Detections] = []

    def add_raw(self, name: str, reference: np.ndarray, actual: np.ndarray) -> float:
        """Record one raw output of a batch; returns its max abs error."""
        err = raw_errors(reference, actual)
        for key, value in err.items():
            self.raw_outputs[name][key] = max(self.raw_outputs[name][key], value)
        return err["max_abs_error"]

    def add_detections(
        self, references: list[Detections], actuals: list[Detections], **match_settings: Any
    ) -> None:
        """Match a batch's detections image by image (``match_settings``: :func:`match_detections`'s)."""
        for ref, got in zip(references, actuals, strict=True):
            self.references.append(ref)
            self.actuals.append(got)
            self.matches.append(match_detections(ref, got, **match_settings))

    def raw_within(self, raw_rel: float) -> bool:
        return all(r["max_rel_error"] <= raw_rel for r in self.raw_outputs.values())

    def detections(self) -> dict[str, Any]:
        return summarize_matches(self.matches)

    def masks(self) -> dict[str, Any]:
        return mask_errors(self.references, self.actuals, self.matches)

"""Matching detections across runtimes: ties are explained, real disagreements are not."""

from __future__ import annotations

import numpy as np

from exporters.compare import Detections, contract_problems, match_detections, raw_errors


def _dets(scores: list[float], classes: list[int], boxes: list[list[float]] | None = None) -> Detections:
    n = len(scores)
    box_array = (
        np.asarray(boxes, np.float32)
        if boxes is not None
        else np.tile(np.arange(n, dtype=np.float32)[:, None], 4)
    )
    return Detections(box_array, np.asarray(scores, np.float32), np.asarray(classes, np.int64))


def _match(ref: Detections, got: Detections, max_detections: int = 100) -> dict[str, float]:
    return match_detections(
        ref,
        got,
        box_tol=1e-4,
        score_tol=1e-5,
        score_threshold=0.05,
        iou_threshold=0.5,
        max_detections=max_detections,
    )


def test_identical_detections_in_another_row_order_match() -> None:
    ref = _dets([0.9, 0.8, 0.7], [0, 1, 2])
    got = Detections(ref.boxes[::-1].copy(), ref.scores[::-1].copy(), ref.classes[::-1].copy())
    assert _match(ref, got) == {
        "reference": 3,
        "actual": 3,
        "matched": 3,
        "unexplained": 0,
        "max_box_error": 0.0,
        "max_score_error": 0.0,
        "pairs": [(2, 0), (1, 1), (0, 2)],  # (reference row, actual row)
    }


def test_a_different_box_is_an_unexplained_mismatch() -> None:
    ref = _dets([0.9, 0.8], [0, 1])
    got = _dets([0.9, 0.8], [0, 1], boxes=[[0, 0, 0, 0], [5, 5, 5, 5]])
    result = _match(ref, got)
    assert result["matched"] == 1 and result["unexplained"] == 2


def test_swapped_tie_and_cut_at_k_are_explained() -> None:
    # The cut at K = 2: two candidates with the same score, each runtime kept a different one.
    ref = _dets([0.9, 0.5], [0, 1], boxes=[[0, 0, 1, 1], [1, 1, 2, 2]])
    got = _dets([0.9, 0.500001], [0, 1], boxes=[[0, 0, 1, 1], [3, 3, 4, 4]])
    assert _match(ref, got, max_detections=2)["unexplained"] == 0
    # NMS between two overlapping tied boxes of one class: either may survive.
    ref = _dets([0.9, 0.5, 0.4], [0, 1, 1], boxes=[[0, 0, 1, 1], [1, 1, 2, 2], [5, 5, 6, 6]])
    got = _dets([0.9, 0.5, 0.4], [0, 1, 1], boxes=[[0, 0, 1, 1], [1, 1, 2, 2.1], [5, 5, 6, 6]])
    assert _match(ref, got)["unexplained"] == 0
    # The same tie but the boxes do not overlap: not something NMS could have decided.
    got = _dets([0.9, 0.5, 0.4], [0, 1, 1], boxes=[[0, 0, 1, 1], [3, 3, 4, 4], [5, 5, 6, 6]])
    assert _match(ref, got)["unexplained"] == 2
    # Missing detection far from any boundary or tie: unexplained.
    assert _match(_dets([0.9, 0.5], [0, 1]), _dets([0.9], [0]))["unexplained"] == 1


def test_contract_problems_name_what_is_wrong() -> None:
    good = {
        "num_detections": np.array([[1]], np.int32),
        "detection_boxes": np.array([[[0, 0, 1, 1], [0, 0, 0, 0]]], np.float32),
        "detection_scores": np.array([[0.5, 0.0]], np.float32),
        "detection_classes": np.array([[2, 0]], np.int32),
    }
    assert contract_problems(good, batch=1, max_detections=2) == []
    bad = dict(good, detection_classes=good["detection_classes"].astype(np.int64))
    assert contract_problems(bad, 1, 2) == ["detection_classes has dtype int64, expected int32"]
    unpadded = dict(good, detection_scores=np.array([[0.5, 0.4]], np.float32))
    assert contract_problems(unpadded, 1, 2) == ["image 0: rows after num_detections (1) are not zero"]


def test_raw_errors_are_relative_to_the_reference_range() -> None:
    errors = raw_errors(np.array([10.0, -20.0]), np.array([10.5, -20.0]))
    assert errors == {"max_abs_error": 0.5, "max_rel_error": 0.025}

"""Matching detections across runtimes: ties are explained, real disagreements are not."""

from __future__ import annotations

import numpy as np
import pytest

from exporters.evaluation.compare import (
    Detections,
    box_errors,
    contract_problems,
    match_detections,
    raw_errors,
)


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


def test_huge_and_infinite_boxes_match_relative_to_their_size_without_warnings() -> None:
    # A young model's size codes overflow exp: boxes millions of input widths wide, or infinite.
    ref = _dets(
        [1.0, 0.9], [0, 1], boxes=[[-3.113154e6, -7.08977, 3.113171e6, -2.375915], [-np.inf, 0, np.inf, 1]]
    )
    got = _dets(
        [1.0, 0.9], [0, 1], boxes=[[-3.113160e6, -7.089747, 3.113177e6, -2.375934], [-np.inf, 0, np.inf, 1]]
    )
    result = _match(ref, got)  # pytest turns numpy's overflow / invalid-value warnings into errors
    assert result["matched"] == 2 and result["unexplained"] == 0
    assert result["max_box_error"] < 1e-5
    # Relative does not mean lax: a normalized box 1e-3 off, or an infinity on one side only, differs.
    errors = box_errors(np.array([[0.1, 0.1, 0.5, 0.5]]), np.array([0.1, 0.1, 0.501, 0.5]))
    assert errors[0] == pytest.approx(1e-3)
    assert (
        _match(_dets([0.9], [0], [[0, 0, np.inf, 1]]), _dets([0.9], [0], [[0, 0, 3e38, 1]]))["unexplained"]
        == 2
    )


def test_an_nms_cascade_from_one_swapped_tie_is_explained() -> None:
    # Tied A and B (IoU > 0.5): the reference kept A, the graph B. C overlaps A only, so the graph keeps
    # C (A is gone there) and the reference suppressed it: explained through A, itself a tie.
    a, b, c = (
        [0.0, 0.0, 1.0, 1.0],
        [0.0, 0.3, 1.0, 1.3],
        [0.0, -0.3, 1.0, 0.7],
    )  # IoU(a, b) = IoU(a, c) = 0.54
    ref = _dets([0.9], [0], boxes=[a])
    got = _dets([0.9, 0.6], [0, 0], boxes=[b, c])
    assert _match(ref, got)["unexplained"] == 0
    # The same extra box with nothing on the reference side that could have suppressed it: unexplained.
    got = _dets([0.9, 0.6], [0, 0], boxes=[a, [3.0, 3.0, 4.0, 4.0]])
    assert _match(ref, got)["unexplained"] == 1


def test_raw_errors_of_non_finite_values() -> None:
    same = raw_errors(np.array([np.inf, 1.0, np.nan]), np.array([np.inf, 1.0, np.nan]))
    assert same == {"max_abs_error": 0.0, "max_rel_error": 0.0}
    overflow = raw_errors(np.array([7e4, 1.0], np.float32), np.array([np.inf, 1.0], np.float32))
    assert overflow["max_abs_error"] == np.inf and overflow["max_rel_error"] == np.inf

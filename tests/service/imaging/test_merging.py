"""Merging tiles' detections: the same groups as SAHI's numpy backend on the same boxes; pieces of an
object cut at a tile border joined into one box (and one mask)."""

from __future__ import annotations

import numpy as np
import pytest
from sahi.postprocess.combine import batched_greedy_nmm, batched_nms

from service.imaging.masks import paste_mask
from service.imaging.merging import (
    MergeRule,
    TilePart,
    group_detections,
    merge_detections,
    merged_mask,
    overlap_matrix,
)
from service.imaging.postprocess import KeptDetections
from service.imaging.tiling import Tile, cut_by_tile


def _random_detections(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 300, (n, 2))
    wh = rng.uniform(5, 80, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.uniform(0.05, 1.0, n).astype(np.float32)
    classes = rng.integers(0, 3, n).astype(np.int32)
    return boxes, scores, classes


def _sahi_input(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return np.concatenate([boxes, scores[:, None], classes[:, None]], axis=1).astype(np.float32)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("metric", ["iou", "ios"])
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_nms_keeps_what_sahi_keeps(seed: int, metric: str, threshold: float) -> None:
    boxes, scores, classes = _random_detections(seed, 150)
    ours = group_detections(boxes, scores, classes, MergeRule("nms", metric, threshold))
    theirs = batched_nms(_sahi_input(boxes, scores, classes), metric.upper(), threshold)
    assert list(ours) == theirs


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("metric", ["iou", "ios"])
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7])
def test_greedy_nmm_groups_as_sahi_does(seed: int, metric: str, threshold: float) -> None:
    boxes, scores, classes = _random_detections(seed, 150)
    ours = group_detections(boxes, scores, classes, MergeRule("greedy_nmm", metric, threshold))
    theirs = batched_greedy_nmm(_sahi_input(boxes, scores, classes), metric.upper(), threshold)
    assert {k: sorted(v) for k, v in ours.items()} == {k: sorted(v) for k, v in theirs.items()}
    assert all(scores[k] >= scores[m] for k, merged in ours.items() for m in merged)


def test_overlap_metrics() -> None:
    boxes = np.array([[0, 0, 10, 10], [5, 0, 10, 10], [20, 20, 20, 30]], dtype=np.float32)
    iou, ios = overlap_matrix(boxes, "iou"), overlap_matrix(boxes, "ios")
    assert iou[0, 1] == pytest.approx(0.5) and ios[0, 1] == pytest.approx(1.0)
    assert iou[0, 2] == 0 and ios[2, 2] == 0  # a box with no area overlaps nothing


def _kept(boxes: list[list[float]], scores: list[float], classes: list[int]) -> KeptDetections:
    return KeptDetections(
        np.array(boxes, dtype=np.float32),
        np.array(scores, dtype=np.float32),
        np.array(classes, dtype=np.int32),
        np.arange(len(scores)),
    )


def _part(kept: KeptDetections, cut: list[bool], masks: np.ndarray | None = None) -> TilePart:
    return TilePart(kept, masks, np.array(cut, dtype=bool))


def test_cut_by_tile_marks_boxes_on_inner_borders_only() -> None:
    boxes = np.array([[90, 10, 110, 50], [0, 0, 20, 20], [40, 40, 60, 60], [95, 100, 105, 128]], np.float32)
    cut = cut_by_tile(boxes, Tile(0, 0, 110, 128), (300, 128))
    assert cut.tolist() == [True, False, False, False]  # x = 110 is inside the image; y = 128 is its edge


def test_an_object_cut_at_a_tile_border_becomes_one_box() -> None:
    # An object at x 90..130 seen whole by the right tile, cut at x = 110 by the left one; a second class
    # at the same place stays apart (class-aware); far away another object stays as it is.
    left = _part(_kept([[90, 10, 110, 50], [300, 300, 320, 320]], [0.6, 0.9], [0, 0]), [True, False])
    right = _part(_kept([[91, 11, 130, 49], [90, 10, 130, 50]], [0.8, 0.7], [0, 1]), [False, False])
    rule = MergeRule("greedy_nmm", "ios", 0.5)
    merged, masks = merge_detections([left, right], rule, limit=10)
    assert masks is None
    assert merged.scores.tolist() == pytest.approx([0.9, 0.8, 0.7])
    assert merged.classes.tolist() == [0, 0, 1]
    assert merged.boxes.tolist() == [[300, 300, 320, 320], [90, 10, 130, 50], [90, 10, 130, 50]]
    nms, _ = merge_detections([left, right], MergeRule("nms", "ios", 0.5), limit=10)
    assert nms.boxes[1].tolist() == [91, 11, 130, 49]  # the kept box as it was
    top, _ = merge_detections([left, right], rule, limit=2)
    assert len(top) == 2 and top.rows.tolist() == [0, 1]


def test_an_uncut_box_never_grows_another() -> None:
    # A small confident object inside a large low-scored box: suppressed, not joined (neither was cut).
    small = _part(_kept([[50, 50, 70, 70]], [0.9], [0]), [False])
    large = _part(_kept([[0, 0, 200, 200]], [0.1], [0]), [False])
    merged, _ = merge_detections([small, large], MergeRule("greedy_nmm", "ios", 0.5), limit=10)
    assert merged.boxes.tolist() == [[50, 50, 70, 70]]


def test_merged_masks_join_in_the_union_box() -> None:
    # Left half and right half of a 40x20 rectangle, each a full 28x28 mask over its own box.
    boxes = np.array([[0, 0, 20, 20], [20, 0, 40, 20]], dtype=np.float32)
    masks = np.ones((2, 28, 28), dtype=np.float32)
    union = np.array([0, 0, 40, 20], dtype=np.float32)
    joined = merged_mask(masks, boxes, [0, 1], union)
    pasted = paste_mask(joined, union, 20, 40)
    assert pasted.bitmap.sum() >= 0.95 * 40 * 20
    only_left = merged_mask(masks, boxes, [0], union)
    assert paste_mask(only_left, union, 20, 40).bitmap[:, 25:].sum() == 0
    left = _part(_kept([[0, 0, 20, 20]], [0.9], [0]), [True], masks[:1])
    right = _part(_kept([[20, 0, 40, 20]], [0.8], [0]), [True], masks[1:])
    merged, out = merge_detections([left, right], MergeRule("greedy_nmm", "iou", 0.0), limit=5)
    assert out is not None and out.shape == (1, 28, 28) and merged.boxes.tolist() == [union.tolist()]

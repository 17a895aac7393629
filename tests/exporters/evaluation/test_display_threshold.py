"""The F1-optimal display threshold: COCO-style matching at IoU 0.5, classes pooled."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest
from pycocotools.coco import COCO

from exporters.evaluation.display_threshold import f1_optimal_threshold


def _gt(boxes: list[tuple[int, int, list[float]]]) -> COCO:
    """``(image_id, category_id, [x, y, w, h])`` per object."""
    coco = COCO()
    coco.dataset = {
        "images": [{"id": i, "width": 100, "height": 100} for i in sorted({b[0] for b in boxes})],
        "categories": [{"id": c, "name": str(c)} for c in sorted({b[1] for b in boxes})],
        "annotations": [
            {"id": n + 1, "image_id": i, "category_id": c, "bbox": box, "area": box[2] * box[3], "iscrowd": 0}
            for n, (i, c, box) in enumerate(boxes)
        ],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def _det(image_id: int, category_id: int, box: list[float], score: float) -> dict[str, Any]:
    return {"image_id": image_id, "category_id": category_id, "bbox": box, "score": score}


def test_the_cut_keeps_the_true_boxes_and_drops_the_junk() -> None:
    gt = _gt([(1, 3, [10, 10, 20, 20]), (1, 7, [50, 50, 30, 30]), (2, 3, [0, 0, 40, 40])])
    results = [
        _det(1, 3, [11, 10, 20, 20], 0.9),  # hit
        _det(1, 7, [50, 52, 30, 30], 0.8),  # hit (another class: pooled)
        _det(2, 3, [1, 1, 40, 40], 0.6),  # hit
        _det(1, 3, [11, 11, 20, 20], 0.5),  # duplicate of a matched object: a false positive
        _det(2, 7, [0, 0, 40, 40], 0.3),  # right place, wrong class: a false positive
        _det(2, 3, [60, 60, 10, 10], 0.2),  # nothing there
    ]
    chosen = f1_optimal_threshold(gt, results)
    assert (chosen.true_positives, chosen.detections_kept, chosen.ground_truth) == (3, 3, 3)
    assert chosen.f1 == 1.0 and chosen.precision == 1.0 and chosen.recall == 1.0
    assert 0.5 < chosen.threshold <= 0.6 and chosen.threshold == 0.55  # between kept and dropped


def test_equal_scores_are_kept_or_dropped_together_and_iou_below_half_misses() -> None:
    gt = _gt([(1, 1, [0, 0, 10, 10]), (1, 1, [50, 50, 10, 10])])
    results = [
        _det(1, 1, [0, 0, 10, 10], 0.7),
        _det(1, 1, [80, 80, 10, 10], 0.7),  # tied with the hit: the cut cannot separate them
        _det(1, 1, [55, 55, 10, 10], 0.4),  # IoU 25/175 < 0.5 with the second object: a miss
    ]
    chosen = f1_optimal_threshold(gt, results)
    assert chosen.detections_kept == 2 and chosen.true_positives == 1
    assert chosen.threshold == pytest.approx(0.55)


def test_nothing_to_choose_from_is_an_error() -> None:
    with pytest.raises(ValueError, match="0 detections"):
        f1_optimal_threshold(_gt([(1, 1, [0, 0, 10, 10])]), [])

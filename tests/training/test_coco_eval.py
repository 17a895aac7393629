import contextlib
import io
from pathlib import Path

import pytest
from pycocotools.coco import COCO

from training.coco_eval import METRIC_NAMES, CocoEvaluator


def _gt(root: Path) -> COCO:
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(root / "annotations" / "instances_val.json"))


def test_ground_truth_fed_back_scores_ap_one(tiny_coco: Path) -> None:
    gt = _gt(tiny_coco)
    results = [
        {"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 1.0}
        for a in gt.dataset["annotations"]
    ]
    evaluator = CocoEvaluator(gt)
    evaluator.update(results, gt.getImgIds())
    stats = evaluator.accumulate_and_summarize(verbose=False)["bbox"]
    assert list(stats) == list(METRIC_NAMES)
    assert stats["AP"] == pytest.approx(1.0)
    assert stats["AP50"] == pytest.approx(1.0)


def test_wrong_class_and_no_results_score_zero(tiny_coco: Path) -> None:
    gt = _gt(tiny_coco)
    cat_ids = gt.getCatIds()
    wrong = [
        {
            "image_id": a["image_id"],
            "category_id": next(c for c in cat_ids if c != a["category_id"]),
            "bbox": a["bbox"],
            "score": 1.0,
        }
        for a in gt.dataset["annotations"]
    ]
    evaluator = CocoEvaluator(gt)
    evaluator.update(wrong, gt.getImgIds())
    assert evaluator.accumulate_and_summarize(verbose=False)["bbox"]["AP"] == pytest.approx(0.0)
    empty = CocoEvaluator(gt)
    assert empty.accumulate_and_summarize(verbose=False)["bbox"]["AP"] == 0.0


def test_per_image_ap_scores_each_image_alone(tiny_coco: Path) -> None:
    gt = _gt(tiny_coco)
    ids = sorted(gt.getImgIds())
    assert len(ids) >= 2
    found, missed = ids[0], ids[1]
    results = [  # every object of the first image found; the second image's objects all missed
        {"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 1.0}
        for a in gt.dataset["annotations"]
        if a["image_id"] == found
    ]
    evaluator = CocoEvaluator(gt)
    evaluator.update(results, [found, missed])
    total = evaluator.accumulate_and_summarize(verbose=False)["bbox"]["AP"]
    per_image = evaluator.per_image_ap()
    assert per_image == {found: pytest.approx(1.0), missed: 0.0}
    assert 0.0 < total < 1.0
    assert CocoEvaluator(gt).per_image_ap() == dict.fromkeys(ids, 0.0)  # nothing evaluated


def test_segmentations_are_scored_as_segm_on_their_own_view(tiny_coco: Path) -> None:
    """Results with masks add ``segm``; a mask-perfect but box-wrong result scores segm 1 and bbox 0."""
    gt = _gt(tiny_coco)
    results = []
    for a in gt.dataset["annotations"]:
        rle = gt.annToRLE(a)  # the exact mask; counts as str, as the evaluator's callers write them
        x, y = a["bbox"][:2]
        results.append(
            {
                "image_id": a["image_id"],
                "category_id": a["category_id"],
                "bbox": [x, y, 1.0, 1.0],  # a one-pixel box: box IoU far below 0.5
                "segmentation": {"size": rle["size"], "counts": rle["counts"].decode("ascii")},
                "score": 1.0,
            }
        )
    evaluator = CocoEvaluator(gt, iou_types=None)
    evaluator.update(results, gt.getImgIds())
    stats = evaluator.accumulate_and_summarize(verbose=False)
    assert set(stats) == {"bbox", "segm"}
    assert stats["segm"]["AP"] == pytest.approx(1.0)
    assert stats["bbox"]["AP"] == pytest.approx(0.0)
    assert all("segmentation" in r for r in evaluator.results)  # the caller's results are left intact

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from training.data.coco import CocoDetection, resolve_split


def test_resolve_split_both_layouts(synthetic_root: Path, coco2017: Path) -> None:
    assert resolve_split(synthetic_root, "val") == (
        synthetic_root / "val",
        synthetic_root / "annotations" / "instances_val.json",
    )
    assert resolve_split(coco2017, "train2017") == (
        coco2017 / "train2017",
        coco2017 / "annotations" / "instances_train2017.json",
    )


def test_resolve_split_names_the_missing_path(coco2017: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"instances_val2017\.json"):
        resolve_split(coco2017, "val2017")
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        resolve_split(coco2017 / "does-not-exist", "train2017")
    (coco2017 / "annotations" / "instances_test.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"image directory .*test"):
        resolve_split(coco2017, "test")


def test_reads_coco2017_layout(coco2017: Path) -> None:
    ds = CocoDetection(coco2017, "train2017")
    assert ds.image_ids == [9, 25, 30]  # ascending id, as DALI's reader
    assert ds.label_map.coco_ids == (1, 90)
    image, target = ds[0]
    assert image.dtype == np.uint8 and image.shape == (40, 60, 3)
    assert target["image_id"] == 9 and target["orig_size"] == (40, 60)
    assert target["boxes"].dtype == np.float32 and target["labels"].dtype == np.int64
    np.testing.assert_array_equal(target["boxes"], [[10, 5, 30, 25], [50, 30, 60, 40]])
    np.testing.assert_array_equal(target["labels"], [2, 1])
    _, empty = ds[1]
    assert empty["boxes"].shape == (0, 4) and empty["labels"].shape == (0,)


def test_skip_empty_drops_images_without_usable_boxes(coco2017: Path) -> None:
    assert CocoDetection(coco2017, "train2017", skip_empty=True).image_ids == [9]


def test_masks(coco2017: Path) -> None:
    ds = CocoDetection(coco2017, "train2017", with_masks=True)
    _, target = ds[0]
    assert target["masks"].dtype == np.uint8 and target["masks"].shape == (2, 40, 60)
    assert target["masks"][0, 5:25, 10:30].all() and target["masks"][0].sum() == 400
    _, empty = ds[1]
    assert empty["masks"].shape == (0, 50, 30)


def test_size_mismatch_is_an_error(coco2017: Path) -> None:
    cv2.imwrite(str(coco2017 / "train2017" / "000000000030.jpg"), np.zeros((21, 20, 3), np.uint8))
    ds = CocoDetection(coco2017, "train2017")
    with pytest.raises(ValueError, match=r"000000000030\.jpg is 20x21"):
        ds[2]


def test_reads_synthetic_set(synthetic_root: Path) -> None:
    ds = CocoDetection(synthetic_root, "train", with_masks=True)
    data: dict[str, Any] = json.loads((synthetic_root / "annotations" / "instances_train.json").read_text())
    assert len(ds) == len(data["images"]) and ds.coco.getImgIds() == ds.image_ids
    image, target = ds[3]
    anns = [a for a in data["annotations"] if a["image_id"] == target["image_id"]]
    xywh = np.array([a["bbox"] for a in anns], np.float32)
    np.testing.assert_array_equal(target["boxes"], np.hstack([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]]))
    np.testing.assert_array_equal(
        target["labels"], [ds.label_map.to_contiguous(a["category_id"]) for a in anns]
    )
    assert target["labels"].min() >= 1 and target["labels"].max() <= ds.label_map.num_classes
    h, w = image.shape[:2]
    for mask, ann in zip(target["masks"], anns, strict=True):
        expected = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(ann["segmentation"], h, w)))
        np.testing.assert_array_equal(mask, expected)


def test_transforms_are_applied(coco2017: Path) -> None:
    def tag(image: np.ndarray, target: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "transformed", {**target, "seen": image.shape}

    ds = CocoDetection(coco2017, "train2017", transforms=tag)
    image, target = ds[0]
    assert image == "transformed" and target["seen"] == (40, 60, 3)

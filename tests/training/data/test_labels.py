from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.data.coco import load_coco
from training.data.labels import LabelMap

# Deliberately neither sorted nor contiguous: labels must follow file order, not id order.
CATEGORIES: list[dict[str, Any]] = [
    {"id": 17, "name": "star", "supercategory": "shape"},
    {"id": 2, "name": "circle", "supercategory": "shape"},
    {"id": 42, "name": "cross", "supercategory": "shape"},
]


def test_labels_follow_file_order() -> None:
    lm = LabelMap.from_categories(CATEGORIES)
    assert lm.num_classes == 3
    assert [lm.to_contiguous(c["id"]) for c in CATEGORIES] == [1, 2, 3]
    assert [lm.to_coco_id(label) for label in (1, 2, 3)] == [17, 2, 42]
    assert [lm.name(label) for label in (1, 2, 3)] == ["star", "circle", "cross"]


def test_unknown_ids_and_labels_are_rejected() -> None:
    lm = LabelMap.from_categories(CATEGORIES)
    with pytest.raises(KeyError, match="category id 3"):
        lm.to_contiguous(3)
    with pytest.raises(KeyError, match="label 0"):
        lm.to_coco_id(0)  # background has no COCO id
    with pytest.raises(KeyError, match="label 4"):
        lm.to_coco_id(4)


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        LabelMap.from_categories([*CATEGORIES, {"id": 2, "name": "again"}])


def test_dict_round_trip_is_json_able() -> None:
    lm = LabelMap.from_categories(CATEGORIES)
    data = json.loads(json.dumps(lm.to_dict()))  # what a checkpoint or manifest stores
    assert LabelMap.from_dict(data) == lm


def test_from_dict_requires_labels_one_to_c() -> None:
    with pytest.raises(ValueError, match=r"labels must be 1\.\.2"):
        LabelMap.from_dict(
            {"categories": [{"label": 1, "coco_id": 5, "name": "a"}, {"label": 3, "coco_id": 6, "name": "b"}]}
        )


def test_from_pycocotools(tmp_path: Path) -> None:
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps({"images": [], "annotations": [], "categories": CATEGORIES}))
    lm = LabelMap.from_coco(load_coco(ann))
    assert lm.coco_ids == (17, 2, 42)
    assert lm.names == ("star", "circle", "cross")

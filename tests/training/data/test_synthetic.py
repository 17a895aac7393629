from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from training.data.synthetic import (
    CATEGORIES,
    SyntheticConfig,
    generate_dataset,
    mask_to_polygons,
    render_sample,
)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    generate_dataset(tmp_path / "a", 3, 2, seed=11)
    generate_dataset(tmp_path / "b", 3, 2, seed=11)
    generate_dataset(tmp_path / "c", 3, 2, seed=12)
    a, b, c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert a == b
    assert sorted(a) == sorted(c)
    assert a["annotations/instances_train.json"] != c["annotations/instances_train.json"]


def test_layout_and_summary(synthetic: dict[str, Any], synthetic_root: Path) -> None:
    for split, count in (("train", 10), ("val", 4)):
        info = synthetic[split]
        assert info["images"] == count
        assert Path(info["annotation_file"]) == synthetic_root / "annotations" / f"instances_{split}.json"
        assert Path(info["images_dir"]) == synthetic_root / split
        assert len(list((synthetic_root / split).glob("*.jpg"))) == count


def test_category_ids_are_not_contiguous(synthetic_root: Path) -> None:
    data = json.loads((synthetic_root / "annotations" / "instances_train.json").read_text())
    ids = [c["id"] for c in data["categories"]]
    assert ids == [cid for cid, _ in CATEGORIES]
    assert ids != list(range(1, len(ids) + 1))
    assert all(set(c) == {"id", "name", "supercategory"} for c in data["categories"])


@pytest.mark.parametrize("split", ["train", "val"])
def test_annotations_are_exact(synthetic_root: Path, split: str) -> None:
    data = json.loads((synthetic_root / "annotations" / f"instances_{split}.json").read_text())
    assert {"info", "licenses", "images", "annotations", "categories"} <= set(data)
    cat_ids = {c["id"] for c in data["categories"]}
    images = {im["id"]: im for im in data["images"]}
    assert len({a["id"] for a in data["annotations"]}) == len(data["annotations"])
    per_image: dict[int, list[np.ndarray]] = {i: [] for i in images}
    for ann in data["annotations"]:
        im = images[ann["image_id"]]
        h, w = im["height"], im["width"]
        assert ann["category_id"] in cat_ids and ann["iscrowd"] == 0
        rle = mask_utils.merge(mask_utils.frPyObjects(ann["segmentation"], h, w))
        mask = mask_utils.decode(rle).astype(bool)
        # bbox is the bounds of the polygon mask, area its pixel count: exact, not approximately.
        assert mask_utils.toBbox(rle).tolist() == ann["bbox"]
        assert mask.sum() == ann["area"] == mask_utils.area(rle)
        xs = np.concatenate([np.asarray(p[0::2]) for p in ann["segmentation"]])
        ys = np.concatenate([np.asarray(p[1::2]) for p in ann["segmentation"]])
        x, y, bw, bh = ann["bbox"]
        assert (xs.min(), ys.min(), xs.max(), ys.max()) == (x, y, x + bw, y + bh)
        # Not tiny: at least 8% of the image on each side.
        assert bw >= 0.08 * w and bh >= 0.08 * h
        per_image[ann["image_id"]].append(mask)
    for image_id, masks in per_image.items():
        assert masks, f"image {image_id} has no objects"
        # Visible masks never overlap: a pixel shows at most one shape.
        assert np.stack(masks).sum(axis=0).max() == 1


def test_images_match_their_records(synthetic_root: Path) -> None:
    data = json.loads((synthetic_root / "annotations" / "instances_train.json").read_text())
    sizes = set()
    for im in data["images"]:
        pixels = cv2.imread(str(synthetic_root / "train" / im["file_name"]))
        assert pixels is not None and pixels.shape == (im["height"], im["width"], 3)
        assert 160 <= im["height"] <= 480 and 160 <= im["width"] <= 480
        sizes.add((im["height"], im["width"]))
    assert len(sizes) > 1  # varied sizes and aspect ratios


def test_rendered_objects_are_mostly_visible() -> None:
    cfg = SyntheticConfig()
    for i in range(8):
        image, objects = render_sample(np.random.default_rng([3, i]), cfg)
        assert image.dtype == np.uint8 and image.ndim == 3
        assert 1 <= len(objects) <= cfg.max_objects
        for obj in objects:
            assert obj.visible.sum() >= cfg.min_visible * obj.painted_area


def test_mask_to_polygons_round_trips_awkward_masks() -> None:
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        h, w = (int(v) for v in rng.integers(3, 30, 2))
        mask = (rng.random((h, w)) < 0.35).astype(np.uint8)  # speckle: diagonal contacts, single pixels
        try:
            polygons = mask_to_polygons(mask)
        except ValueError:
            continue  # holes are refused, not approximated
        if not polygons:
            assert not mask.any()
            continue
        decoded = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polygons, h, w)))
        assert np.array_equal(decoded, mask)
        checked += 1
    assert checked > 50


def test_mask_with_hole_is_refused() -> None:
    ring = np.ones((5, 5), np.uint8)
    ring[2, 2] = 0
    with pytest.raises(ValueError, match="hole"):
        mask_to_polygons(ring)

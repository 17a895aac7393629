"""A synthetic COCO-format detection dataset: coloured shapes on cluttered backgrounds.

It writes the real COCO layout, so every loader, evaluator and CLI path runs on it unchanged::

    out/train/000000000001.jpg ...      out/annotations/instances_train.json
    out/val/000000000001.jpg ...        out/annotations/instances_val.json

Annotations are exact for what is visible. Shapes are painted back to front; each shape's mask is
rasterized with the same call that paints it, the masks of later (occluding) shapes are subtracted, and
``bbox``, ``area`` and the ``segmentation`` polygons all come from that visible mask:

- ``bbox`` [x, y, w, h] and the polygons use pixel-edge coordinates (pixel (r, c) covers
  [c, c + 1] x [r, r + 1]), so ``bbox`` equals the bounds of the polygons and pycocotools decodes the
  polygons back to exactly the visible mask (the generator checks this for every object).
- ``area`` is the number of visible pixels.
- A placement is rejected (and retried) when it would leave an earlier shape less than ``min_visible``
  visible, smaller than ``min_box_fraction`` of the image on either side, or with a hole (COCO polygons
  cannot express holes). So every painted shape is annotated and every annotation is a real object.

Clutter (lines, scribbles, dots, soft blobs, textures, noise) is part of the background and never a class.
Category ids are deliberately not contiguous, as COCO's are. Everything is drawn from
``numpy.random.default_rng([seed, split, index])``, so a seed gives byte-identical images and JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from training.data.synthetic_scene import (
    CATEGORIES,
    SyntheticConfig,
    SyntheticObject,
    mask_bounds,
    mask_to_polygons,
    render_sample,
)

_SPLITS = {"train": 0, "val": 1}

__all__ = [
    "CATEGORIES",
    "SyntheticConfig",
    "SyntheticObject",
    "generate_dataset",
    "mask_to_polygons",
    "render_sample",
]


def _annotation(
    obj: SyntheticObject, image_hw: tuple[int, int], ann_id: int, image_id: int
) -> dict[str, Any]:
    bounds = mask_bounds(obj.visible)
    assert bounds is not None  # _visible_ok guaranteed a non-empty mask
    bx, by, w, h = bounds
    x, y = obj.box[0] + bx, obj.box[1] + by
    crop = obj.visible[by : by + h, bx : bx + w]
    polygons = [[v + (x if i % 2 == 0 else y) for i, v in enumerate(poly)] for poly in mask_to_polygons(crop)]
    # Guard the claim "polygons decode to the visible mask" on every object written.
    height, width = image_hw
    decoded = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polygons, height, width)))
    if not np.array_equal(decoded.astype(bool), obj.mask(height, width)):
        raise AssertionError(f"polygon round trip failed for annotation {ann_id} of image {image_id}")
    return {
        "id": ann_id,
        "image_id": image_id,
        "category_id": obj.category_id,
        "bbox": [float(x), float(y), float(w), float(h)],
        "area": float(crop.sum()),
        "segmentation": polygons,
        "iscrowd": 0,
    }


def _write_split(root: Path, split: str, count: int, seed: int, cfg: SyntheticConfig) -> dict[str, Any]:
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for index in range(count):
        rng = np.random.default_rng([seed, _SPLITS[split], index])
        image, objects = render_sample(rng, cfg)
        image_id = index + 1
        file_name = f"{image_id:012d}.jpg"
        ok, encoded = cv2.imencode(
            ".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, cfg.jpeg_quality]
        )
        if not ok:
            raise RuntimeError(f"JPEG encoding failed for {file_name}")
        (image_dir / file_name).write_bytes(encoded.tobytes())
        height, width = image.shape[:2]
        images.append(
            {"id": image_id, "file_name": file_name, "width": width, "height": height, "license": 1}
        )
        for obj in objects:
            annotations.append(_annotation(obj, (height, width), len(annotations) + 1, image_id))
    dataset = {
        "info": {
            "description": f"synthetic shapes, {split} split, seed {seed}",
            "version": "1.0",
            "year": 2024,
            "contributor": "training.data.synthetic",
            "url": "",
            "date_created": "2024-01-01",  # fixed: output must be byte-identical per seed
        },
        "licenses": [
            {"id": 1, "name": "CC0 1.0", "url": "https://creativecommons.org/publicdomain/zero/1.0/"}
        ],
        "images": images,
        "annotations": annotations,
        "categories": [{"id": cid, "name": name, "supercategory": "shape"} for cid, name in cfg.categories],
    }
    ann_file = root / "annotations" / f"instances_{split}.json"
    ann_file.parent.mkdir(parents=True, exist_ok=True)
    ann_file.write_text(json.dumps(dataset, separators=(",", ":")))
    return {
        "images_dir": str(image_dir),
        "annotation_file": str(ann_file),
        "images": len(images),
        "annotations": len(annotations),
    }


def generate_dataset(
    out_dir: str | Path,
    num_train: int,
    num_val: int,
    seed: int = 0,
    config: SyntheticConfig | None = None,
) -> dict[str, Any]:
    """Write a synthetic dataset in the COCO layout under ``out_dir`` and describe it.

    Returns:
        ``{"root", "seed", "categories": [{"id", "name"}], "train": {...}, "val": {...}}`` where each split
        has ``images_dir``, ``annotation_file``, ``images`` and ``annotations`` (counts).
    """
    if num_train < 0 or num_val < 0:
        raise ValueError(f"image counts must be >= 0, got num_train={num_train}, num_val={num_val}")
    cfg = config or SyntheticConfig()
    root = Path(out_dir)
    summary: dict[str, Any] = {
        "root": str(root),
        "seed": seed,
        "categories": [{"id": cid, "name": name} for cid, name in cfg.categories],
    }
    for split, count in (("train", num_train), ("val", num_val)):
        summary[split] = _write_split(root, split, count, seed, cfg)
    return summary


def main(argv: list[str] | None = None) -> None:
    """``python -m training.data.synthetic OUT_DIR --train 1000 --val 200 --seed 0``"""
    import argparse

    parser = argparse.ArgumentParser(description="Write a synthetic COCO-format shapes dataset.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--train", type=int, default=1000, help="training images")
    parser.add_argument("--val", type=int, default=200, help="validation images")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    summary = generate_dataset(args.out_dir, args.train, args.val, seed=args.seed)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

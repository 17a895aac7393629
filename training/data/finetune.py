"""Fine-tuning data: a reviewed captured dataset mixed with the original training split by a ratio.

The service's sample capture (``service/capture``, docs/capture.md) writes a COCO dataset whose
annotations are the model's own predictions, each marked ``"prediction": true`` with its ``score``. Those
are not labels: a person reviews them (CVAT or Label Studio import the COCO file, the reviewed file is
exported as COCO again) and training reads only a reviewed file. The rule, checked by `read_reviewed`:

- no annotation may still carry ``"prediction": true`` (an exported review has no such field; a script
  that labels the images another way drops it or sets it to false);
- every category must be one of the original training split's, by name (ids are mapped by name);
- the file must have at least one image.

`write_mixed_dataset` then writes a dataset of its own (``train`` and ``val`` splits in the COCO layout,
images linked, not copied) whose ``train`` split holds the reviewed images as ``mix_ratio`` of its images
and original training images as the rest, and whose ``val`` split is the original one, so the run's
evaluation measures what fine-tuning costs on the original data. Needs no torch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.data.coco import resolve_split

__all__ = ["MixedDataset", "read_reviewed", "write_mixed_dataset"]


@dataclass(frozen=True)
class MixedDataset:
    """What `write_mixed_dataset` wrote: its root and how many images of each source its train split has
    (a reviewed image repeated to reach the ratio counts each time)."""

    root: Path
    captured_images: int
    original_images: int
    reviewed_annotations: int


def read_reviewed(root: str | Path, split: str) -> tuple[Path, dict[str, Any]]:
    """``(images_dir, coco)`` of a reviewed captured dataset; ValueError saying why it is not one."""
    images_dir, ann_file = resolve_split(root, split)
    try:
        coco = json.loads(ann_file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ann_file}: not valid JSON ({exc})") from None
    if not isinstance(coco, dict) or not isinstance(coco.get("images"), list):
        raise ValueError(f"{ann_file}: not a COCO file (no 'images' list)")
    annotations = coco.get("annotations") or []
    unreviewed = [a for a in annotations if a.get("prediction") is True]
    if unreviewed:
        raise ValueError(
            f"{ann_file}: {len(unreviewed)} of {len(annotations)} annotations are still the model's "
            'predictions ("prediction": true): review them first (import the file into CVAT or Label '
            "Studio, correct the boxes, export COCO; docs/flywheel.md), then train on the exported file"
        )
    if not coco["images"]:
        raise ValueError(f"{ann_file}: no images")
    return images_dir, coco


def _category_map(reviewed: dict[str, Any], original: dict[str, Any], where: Path) -> dict[int, int]:
    by_name = {str(c["name"]): int(c["id"]) for c in original["categories"]}
    mapping: dict[int, int] = {}
    for category in reviewed.get("categories") or []:
        name = str(category["name"])
        if name not in by_name:
            raise ValueError(
                f"{where}: category {name!r} is not one of the original training split's ({sorted(by_name)})"
            )
        mapping[int(category["id"])] = by_name[name]
    return mapping


def _counts(captured: int, original: int, mix_ratio: float) -> tuple[int, int]:
    """(captured entries, original entries) of the mixed split: every captured image at least once, the
    original images sampled (or all of them, the captured ones then repeated) to make the ratio."""
    wanted_original = round(captured * (1 - mix_ratio) / mix_ratio)
    if wanted_original <= original:
        return captured, wanted_original
    return max(captured, math.ceil(original * mix_ratio / (1 - mix_ratio))), original


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed: copy
        shutil.copyfile(source, target)


def write_mixed_dataset(
    original_root: str | Path,
    original_split: str,
    original_val_split: str,
    reviewed_root: str | Path,
    reviewed_split: str,
    out: str | Path,
    mix_ratio: float,
    seed: int = 0,
) -> MixedDataset:
    """Write the mixed dataset under ``out`` (replacing what is there); see the module docstring.

    ``mix_ratio`` (0 < r < 1) is the share of reviewed images in the train split.
    """
    if not 0.0 < mix_ratio < 1.0:
        raise ValueError(f"--mix-ratio must be between 0 and 1 (exclusive), got {mix_ratio}")
    reviewed_dir, reviewed = read_reviewed(reviewed_root, reviewed_split)
    original_dir, original_file = resolve_split(original_root, original_split)
    original = json.loads(original_file.read_text())
    categories = _category_map(reviewed, original, reviewed_dir)
    n_captured, n_original = _counts(len(reviewed["images"]), len(original["images"]), mix_ratio)
    rng = np.random.default_rng(seed)
    picked = rng.permutation(len(original["images"]))[:n_original]
    sources: list[tuple[Path, dict[str, Any], dict[str, Any], dict[int, int] | None]] = [
        (original_dir, original, original["images"][int(i)], None) for i in sorted(picked)
    ]
    sources += [
        (reviewed_dir, reviewed, reviewed["images"][i % len(reviewed["images"])], categories)
        for i in range(n_captured)
    ]
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    train_dir = out / "train"
    train_dir.mkdir(parents=True)
    by_image: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for source_index, coco in enumerate((original, reviewed)):
        for ann in coco.get("annotations") or []:
            by_image.setdefault((source_index, int(ann["image_id"])), []).append(ann)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for image_id, (folder, coco, image, mapping) in enumerate(sources, start=1):
        file_name = f"{image_id:08d}{Path(image['file_name']).suffix}"
        _link(folder / image["file_name"], train_dir / file_name)
        size = {"width": image["width"], "height": image["height"]}
        images.append({"id": image_id, "file_name": file_name, **size})
        for ann in by_image.get((0 if coco is original else 1, int(image["id"])), []):
            category = int(ann["category_id"]) if mapping is None else mapping[int(ann["category_id"])]
            kept = {k: v for k, v in ann.items() if k in ("bbox", "area", "iscrowd", "segmentation")}
            kept.setdefault("area", float(ann["bbox"][2] * ann["bbox"][3]))
            kept.setdefault("iscrowd", 0)
            annotations.append(
                {**kept, "id": len(annotations) + 1, "image_id": image_id, "category_id": category}
            )
    (out / "annotations").mkdir()
    mixed = {"images": images, "annotations": annotations, "categories": original["categories"]}
    (out / "annotations" / "instances_train.json").write_text(json.dumps(mixed))
    val_dir, val_file = resolve_split(original_root, original_val_split)
    (out / "val").symlink_to(val_dir.resolve(), target_is_directory=True)
    shutil.copyfile(val_file, out / "annotations" / "instances_val.json")
    reviewed_annotations = sum(1 for a in annotations if a["image_id"] > n_original)
    return MixedDataset(out, n_captured, n_original, reviewed_annotations)

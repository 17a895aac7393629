"""COCO-format datasets: locating a split and reading (image, target) pairs with pycocotools.

Two layouts resolve without configuration::

    root/annotations/instances_<split>.json  +  root/<split>/   (this repo's synthetic sets: train, val;
                                                                  real COCO 2017: train2017, val2017)

Images are decoded as stored, ignoring EXIF orientation, because COCO's ``width``/``height`` and boxes
refer to the stored pixels; the DALI pipeline decodes the same way (``adjust_orientation=False``).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray
from pycocotools.coco import COCO
from torch.utils.data import Dataset

from training.data.labels import LabelMap

__all__ = ["MIN_BOX_SIDE", "CocoDetection", "Target", "load_coco", "read_image_rgb", "resolve_split"]

# Boxes thinner than this (pixels) are dropped; DALI's COCO reader drops them by the same rule
# (its ``size_threshold`` default), so both loaders see the same objects.
MIN_BOX_SIDE = 0.1

Target = dict[str, Any]
Transform = Callable[[NDArray[np.uint8], Target], tuple[Any, Target]]


def resolve_split(root: str | Path, split: str) -> tuple[Path, Path]:
    """``(images_dir, annotation_file)`` of ``split`` under a COCO-layout ``root``.

    Raises:
        FileNotFoundError: naming the missing directory or annotation file.
    """
    root = Path(root)
    images_dir = root / split
    annotation_file = root / "annotations" / f"instances_{split}.json"
    if not root.is_dir():
        raise FileNotFoundError(f"dataset root {root} does not exist")
    if not annotation_file.is_file():
        raise FileNotFoundError(
            f"annotation file {annotation_file} for split {split!r} does not exist "
            f"(expected the COCO layout root/annotations/instances_<split>.json)"
        )
    if not images_dir.is_dir():
        raise FileNotFoundError(f"image directory {images_dir} for split {split!r} does not exist")
    return images_dir, annotation_file


def load_coco(annotation_file: str | Path) -> COCO:
    """A ``pycocotools`` COCO index, without its progress prints on stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(annotation_file))


def read_image_rgb(path: str | Path) -> NDArray[np.uint8]:
    """Decode an image file to uint8 RGB ``[H, W, 3]`` (stored orientation, EXIF ignored)."""
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if bgr is None:
        raise OSError(f"cannot decode image {path}")
    return np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)


class CocoDetection(Dataset[tuple[Any, Target]]):
    """Images and box targets of a COCO-format split.

    ``dataset[i]`` returns ``(image, target)``; without ``transforms`` ``image`` is uint8 RGB numpy
    ``[H, W, 3]`` and ``target`` holds:

    - ``boxes``: float32 numpy ``[M, 4]``, x1, y1, x2, y2 in pixels, clipped to the image;
    - ``labels``: int64 numpy ``[M]``, contiguous labels 1..C (see :attr:`label_map`);
    - ``image_id``: int, the COCO image id;
    - ``orig_size``: ``(height, width)`` of the stored image;
    - ``masks``: uint8 numpy ``[M, H, W]``, only when ``with_masks``.

    Crowd annotations (``iscrowd=1``) and boxes thinner than :data:`MIN_BOX_SIDE` are skipped.
    ``transforms(image, target)`` is applied last and may return any types (e.g. tensors).

    Args:
        root: dataset root (see :func:`resolve_split`).
        split: split name, e.g. ``"train"`` or ``"val2017"``.
        transforms: optional callable ``(image, target) -> (image, target)``.
        with_masks: also decode instance masks.
        skip_empty: leave out images with no usable annotation (as DALI's ``skip_empty``); for training.

    Attributes:
        coco: the pycocotools ``COCO`` index (for evaluation).
        label_map: category ids <-> labels, in annotation-file order.
        image_ids: COCO image ids in dataset order (ascending id, as DALI's reader).
    """

    def __init__(
        self,
        root: str | Path,
        split: str,
        transforms: Transform | None = None,
        with_masks: bool = False,
        skip_empty: bool = False,
    ) -> None:
        self.images_dir, self.annotation_file = resolve_split(root, split)
        self.coco = load_coco(self.annotation_file)
        self.label_map = LabelMap.from_coco(self.coco)
        self.transforms = transforms
        self.with_masks = with_masks
        ids = sorted(self.coco.imgs)
        if skip_empty:
            ids = [i for i in ids if self._annotations(i)]
        self.image_ids: list[int] = ids

    def __len__(self) -> int:
        return len(self.image_ids)

    def _annotations(self, image_id: int) -> list[dict[str, Any]]:
        """Usable annotations of an image: not crowd, box at least MIN_BOX_SIDE on both sides."""
        anns = self.coco.imgToAnns.get(image_id, [])
        return [
            a
            for a in anns
            if not a.get("iscrowd", 0) and a["bbox"][2] >= MIN_BOX_SIDE and a["bbox"][3] >= MIN_BOX_SIDE
        ]

    def __getitem__(self, index: int) -> tuple[Any, Target]:
        image_id = self.image_ids[index]
        info = self.coco.imgs[image_id]
        path = self.images_dir / info["file_name"]
        image = read_image_rgb(path)
        height, width = image.shape[:2]
        if (height, width) != (info["height"], info["width"]):
            raise ValueError(
                f"{path} is {width}x{height} but its annotation says {info['width']}x{info['height']}"
            )
        anns = self._annotations(image_id)
        boxes = np.array([a["bbox"] for a in anns], dtype=np.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]  # x, y, w, h -> x1, y1, x2, y2
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, width)
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, height)
        # Clipping can make a box that lay outside the image degenerate.
        keep = ((boxes[:, 2] - boxes[:, 0]) >= MIN_BOX_SIDE) & ((boxes[:, 3] - boxes[:, 1]) >= MIN_BOX_SIDE)
        anns = [a for a, k in zip(anns, keep, strict=True) if k]
        target: Target = {
            "boxes": boxes[keep],
            "labels": np.array(
                [self.label_map.to_contiguous(a["category_id"]) for a in anns], dtype=np.int64
            ),
            "image_id": int(image_id),
            "orig_size": (height, width),
        }
        if self.with_masks:
            masks = [self.coco.annToMask(a) for a in anns]
            target["masks"] = (
                np.stack(masks).astype(np.uint8) if masks else np.zeros((0, height, width), dtype=np.uint8)
            )
        if self.transforms is not None:
            return self.transforms(image, target)
        return image, target

"""SSD320 augmentation for the plain PyTorch DataLoader (TF object detection API semantics).

NVIDIA's ``ssd320_full_8gpus.config``: ``random_horizontal_flip`` (p = 0.5), then ``random_crop_image``
(``min_object_covered`` 0, aspect ratio 0.75-3.0, area 0.75-1.0 of the image, ``overlap_thresh`` 0,
always applied), then the fixed 320x320 resize (aspect ratio not kept). No colour jitter in that config.

Input and output follow :mod:`training.detectors.ssd300.transforms`: ``(image uint8 RGB [H, W, 3], target)``
with ``boxes`` xyxy pixels in, ``(image float32 [3, size, size], target)`` with ``boxes`` xyxy normalized out.
Evaluation uses :class:`training.detectors.ssd300.transforms.SSDEvalTransform` (resize + normalize).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from torch import Tensor

from training.detectors.ssd300.transforms import (
    SSDTrainTransform,
    _as_output,
    normalize_to_tensor,
    resize_image,
)

__all__ = ["CROP_AREA", "CROP_ASPECT", "SSD320TrainTransform", "random_crop_image"]

CROP_AREA = (0.75, 1.0)  # of the image area
CROP_ASPECT = (0.75, 3.0)  # width / height of the crop, in pixels
CROP_ATTEMPTS = 100  # tf.image.sample_distorted_bounding_box's default max_attempts


def _crop_size(
    height: int, width: int, rng: np.random.Generator, area: tuple[float, float], aspect: tuple[float, float]
) -> tuple[int, int] | None:
    """One attempt of TF's ``GenerateRandomCrop``: (crop height, crop width) or None when it fails."""
    ratio = rng.uniform(*aspect)
    min_area, max_area = area[0] * height * width, area[1] * height * width
    crop_h = round(math.sqrt(min_area / ratio))
    max_h = round(math.sqrt(max_area / ratio))
    if round(max_h * ratio) > width:
        max_h = int((width + 0.5 - 1e-7) / ratio)  # the largest height whose width still fits
    max_h = min(max_h, height)
    crop_h = min(crop_h, max_h)
    if crop_h < max_h:
        crop_h += int(rng.integers(0, max_h - crop_h + 1))
    crop_w = round(crop_h * ratio)
    if crop_w * crop_h < min_area:  # rounding may leave the area just short: one pixel taller
        crop_h += 1
        crop_w = round(crop_h * ratio)
    size_ok = 0 < crop_w <= width and 0 < crop_h <= height
    if not size_ok or not min_area <= crop_w * crop_h <= max_area:
        return None
    return crop_h, crop_w


def random_crop_image(
    image: NDArray[np.uint8],
    boxes: NDArray[np.float32],
    labels: NDArray[np.int64],
    rng: np.random.Generator,
    area: tuple[float, float] = CROP_AREA,
    aspect: tuple[float, float] = CROP_ASPECT,
    max_attempts: int = CROP_ATTEMPTS,
) -> tuple[NDArray[np.uint8], NDArray[np.float32], NDArray[np.int64]]:
    """TF's ``random_crop_image`` with ``min_object_covered`` 0 and ``overlap_thresh`` 0.

    The window's aspect ratio is drawn uniformly from ``aspect`` and its height uniformly among the
    heights whose area lies in ``area`` (TF's ``sample_distorted_bounding_box``); the window is placed
    uniformly. After ``max_attempts`` failures the whole image is kept. Boxes entirely outside the window
    are dropped, the rest clipped to it: objects may be cut to slivers, or all cropped away.

    Args:
        image: uint8 ``[H, W, 3]``. boxes: float32 ``[M, 4]`` xyxy pixels. labels: ``[M]``.
    Returns:
        the crop and its boxes (xyxy pixels of the crop) and labels.
    """
    height, width = image.shape[:2]
    for _ in range(max_attempts):
        size = _crop_size(height, width, rng, area, aspect)
        if size is None:
            continue
        crop_h, crop_w = size
        y0 = int(rng.integers(0, height - crop_h)) if crop_h < height else 0
        x0 = int(rng.integers(0, width - crop_w)) if crop_w < width else 0
        x1, y1 = x0 + crop_w, y0 + crop_h
        inside = (boxes[:, 0] < x1) & (boxes[:, 2] > x0) & (boxes[:, 1] < y1) & (boxes[:, 3] > y0)
        kept = boxes[inside].copy()
        kept[:, 0::2] = kept[:, 0::2].clip(x0, x1) - x0
        kept[:, 1::2] = kept[:, 1::2].clip(y0, y1) - y0
        return image[y0:y1, x0:x1], kept, labels[inside]
    return image, boxes, labels


class SSD320TrainTransform(SSDTrainTransform):
    """Flip, TF random crop, stretch resize to ``size x size``, ImageNet normalization.

    Randomness as :class:`~training.detectors.ssd300.transforms.SSDTrainTransform` (per worker and epoch).
    """

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        rng = self._generator()
        boxes = np.asarray(target["boxes"], dtype=np.float32).reshape(-1, 4)
        labels = np.asarray(target["labels"], dtype=np.int64).reshape(-1)
        if rng.random() < 0.5:
            image = image[:, ::-1]
            boxes = boxes.copy()
            boxes[:, [0, 2]] = image.shape[1] - boxes[:, [2, 0]]
        image, boxes, labels = random_crop_image(image, boxes, labels, rng)
        resized = resize_image(np.ascontiguousarray(image), self.size)
        return normalize_to_tensor(resized), _as_output(target, boxes, labels, image.shape[:2])

"""SSD300 augmentation for the plain PyTorch DataLoader, with the DALI pipeline's semantics.

Train order (as NVIDIA's DALI pipeline, ``training.detectors.ssd300.dali``): SSD random IoU crop -> horizontal
flip (p = 0.5) -> resize straight to ``size x size`` -> colour twist (hue, saturation, brightness,
contrast) -> scale to 0-1 and ImageNet-normalize. Evaluation: resize + normalize only.

Both transforms take ``(image uint8 RGB [H, W, 3], target)`` as produced by
:class:`training.data.coco.CocoDetection` (``boxes`` float32 ``[M, 4]`` xyxy pixels, ``labels`` int64
``[M]``) and return ``(image float32 Tensor [3, size, size], target)`` with ``boxes`` a float32 Tensor
``[M', 4]`` xyxy normalized to 0-1 of the output image and ``labels`` an int64 Tensor ``[M']``; other
target keys pass through. Masks are not carried (SSD has no mask head): a ``masks`` key is dropped.
"""

from __future__ import annotations

import math
from typing import Any, cast

import cv2
import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from contract.geometry import resize
from training.data.imagenet import IMAGENET_MEAN, IMAGENET_STD
from training.data.rng import WorkerRng

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IOU_CROP_OPTIONS",
    "SSDEvalTransform",
    "SSDTrainTransform",
    "color_twist_matrix",
    "normalize_to_tensor",
    "random_iou_crop",
    "resize_image",
]

# SSD's crop modes: None = keep the whole image; a number = every box must overlap the crop with IoU
# above it. DALI's random_bbox_crop with allow_no_crop=True chooses among the same seven uniformly.
IOU_CROP_OPTIONS: tuple[float | None, ...] = (None, 0.0, 0.1, 0.3, 0.5, 0.7, 0.9)
CROP_SCALING = (0.3, 1.0)  # crop side, relative to the image side
CROP_ASPECT = (0.5, 2.0)  # relative width / relative height, as DALI without input_shape
HUE_DEGREES = (-0.5, 0.5)
SATURATION = (0.5, 1.5)
BRIGHTNESS = (0.875, 1.125)
CONTRAST = (0.5, 1.5)

# DALI's hsv operator is a linear map in YIQ space (rotate I/Q by -hue, scale them by the saturation,
# back to RGB with the exact inverse). Fitted against DALI 2.4's output: the same matrix to 1e-4.
_RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]], np.float64)
_YIQ2RGB = np.linalg.inv(_RGB2YIQ)


def color_twist_matrix(
    hue_degrees: float, saturation: float, brightness: float, contrast: float, center: float = 128.0
) -> NDArray[np.float32]:
    """3x4 affine map on 0-255 RGB pixels: DALI ``hsv(hue, saturation)`` then ``brightness_contrast``.

    ``brightness_contrast`` computes ``brightness * (center + contrast * (x - center))``; NVIDIA's SSD
    pipeline uses ``center = 128`` for 0-255 input.
    """
    h = math.radians(hue_degrees)
    hue = np.array([[1, 0, 0], [0, math.cos(h), math.sin(h)], [0, -math.sin(h), math.cos(h)]])
    sat = np.diag([1.0, saturation, saturation])
    hsv = _YIQ2RGB @ hue @ sat @ _RGB2YIQ
    linear = brightness * contrast * hsv
    offset = np.full((3, 1), brightness * center * (1.0 - contrast))
    return np.hstack([linear, offset]).astype(np.float32)


def resize_image(image: NDArray[Any], size: int) -> NDArray[Any]:
    """Resize to ``size x size`` ignoring the aspect ratio.

    `contract.geometry`'s rule: area filtering when shrinking approximates DALI's antialiased linear
    resize; linear when enlarging.
    """
    return resize(image, size, size)


def normalize_to_tensor(image: NDArray[Any]) -> Tensor:
    """uint8/float 0-255 RGB ``[H, W, 3]`` -> float32 Tensor ``[3, H, W]``, 0-1 then ImageNet mean/std."""
    mean = np.array(IMAGENET_MEAN, np.float32) * 255.0
    inv_std = 1.0 / (np.array(IMAGENET_STD, np.float32) * 255.0)
    chw = ((image.astype(np.float32) - mean) * inv_std).transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(chw))


def _box_iou(boxes: NDArray[np.float32], crop: NDArray[np.float32]) -> NDArray[np.float32]:
    """IoU of ``boxes [M, 4]`` with one ``crop [4]`` (xyxy)."""
    lt = np.maximum(boxes[:, :2], crop[:2])
    rb = np.minimum(boxes[:, 2:], crop[2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    area_b = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    area_c = float(np.prod(crop[2:] - crop[:2]))
    return cast("NDArray[np.float32]", inter / np.maximum(area_b + area_c - inter, 1e-12))


def random_iou_crop(
    image: NDArray[np.uint8],
    boxes: NDArray[np.float32],
    labels: NDArray[np.int64],
    rng: np.random.Generator,
    max_trials: int = 50,
) -> tuple[NDArray[np.uint8], NDArray[np.float32], NDArray[np.int64]]:
    """SSD's random IoU crop (NVIDIA ``SSDCropping``; DALI ``random_bbox_crop`` with the same arguments).

    Draws a mode from :data:`IOU_CROP_OPTIONS`; ``None`` returns the input. Otherwise a window with
    relative sides in ``[0.3, 1]`` and relative aspect in ``[0.5, 2]`` is accepted when every box has
    IoU > the mode's threshold with it and at least one box centre lies strictly inside; boxes whose
    centres are outside are dropped, the rest clipped to the window. A mode without a valid window after
    one try is redrawn (as NVIDIA's loop with one attempt per mode), at most ``max_trials`` times, after
    which the image is returned uncropped.

    Args:
        image: uint8 ``[H, W, 3]``. boxes: float32 ``[M, 4]`` xyxy pixels. labels: ``[M]``.
    Returns:
        the cropped image and its boxes (xyxy pixels of the crop) and labels.
    """
    height, width = image.shape[:2]
    if boxes.shape[0] == 0:
        return image, boxes, labels
    for _ in range(max_trials):
        mode = IOU_CROP_OPTIONS[int(rng.integers(len(IOU_CROP_OPTIONS)))]
        if mode is None:
            return image, boxes, labels
        w_rel, h_rel = rng.uniform(*CROP_SCALING, size=2)
        if not CROP_ASPECT[0] <= w_rel / h_rel <= CROP_ASPECT[1]:
            continue
        left, top = rng.uniform(0.0, 1.0 - w_rel), rng.uniform(0.0, 1.0 - h_rel)
        # Snap the window to whole pixels first, so boxes are mapped with the crop actually taken.
        x0, y0 = round(left * width), round(top * height)
        x1, y1 = max(round((left + w_rel) * width), x0 + 1), max(round((top + h_rel) * height), y0 + 1)
        crop = np.array([x0, y0, x1, y1], dtype=np.float32)
        if not (_box_iou(boxes, crop) > mode).all():
            continue
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        inside = (centres > crop[:2]).all(axis=1) & (centres < crop[2:]).all(axis=1)
        if not inside.any():
            continue
        kept = boxes[inside].copy()
        kept[:, 0::2] = kept[:, 0::2].clip(x0, x1) - x0
        kept[:, 1::2] = kept[:, 1::2].clip(y0, y1) - y0
        return image[y0:y1, x0:x1], kept, labels[inside]
    return image, boxes, labels


def _as_output(
    target: dict[str, Any], boxes: NDArray[np.float32], labels: NDArray[np.int64], hw: tuple[int, int]
) -> dict[str, Any]:
    height, width = hw
    scale = np.array([width, height, width, height], dtype=np.float32)
    out = {k: v for k, v in target.items() if k not in ("boxes", "labels", "masks")}
    out["boxes"] = torch.from_numpy((boxes.reshape(-1, 4) / scale).clip(0.0, 1.0).astype(np.float32))
    out["labels"] = torch.from_numpy(np.asarray(labels, dtype=np.int64).reshape(-1))
    return out


class SSDTrainTransform:
    """SSD training augmentation, then ``size x size`` normalized tensor (see the module docstring).

    Randomness: :class:`training.data.rng.WorkerRng` (reproducible per worker and epoch).
    """

    def __init__(self, size: int = 300, seed: int | None = None) -> None:
        self.size = size
        self.seed = seed
        self._generator = WorkerRng(seed)

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        rng = self._generator()
        boxes = np.asarray(target["boxes"], dtype=np.float32).reshape(-1, 4)
        labels = np.asarray(target["labels"], dtype=np.int64).reshape(-1)
        image, boxes, labels = random_iou_crop(image, boxes, labels, rng)
        height, width = image.shape[:2]
        if rng.random() < 0.5:
            image = image[:, ::-1]
            boxes = boxes.copy()
            boxes[:, [0, 2]] = width - boxes[:, [2, 0]]
        resized = resize_image(np.ascontiguousarray(image), self.size)
        matrix = color_twist_matrix(
            hue_degrees=rng.uniform(*HUE_DEGREES),
            saturation=rng.uniform(*SATURATION),
            brightness=rng.uniform(*BRIGHTNESS),
            contrast=rng.uniform(*CONTRAST),
        )
        twisted = cv2.transform(resized.astype(np.float32), matrix)
        # DALI's brightness_contrast writes uint8: saturate and round the same way.
        twisted = np.rint(np.clip(twisted, 0.0, 255.0))
        return normalize_to_tensor(twisted), _as_output(target, boxes, labels, (height, width))


class SSDEvalTransform:
    """Resize straight to ``size x size`` and normalize; boxes normalized to 0-1 of the original image."""

    def __init__(self, size: int = 300) -> None:
        self.size = size

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        boxes = np.asarray(target["boxes"], dtype=np.float32).reshape(-1, 4)
        labels = np.asarray(target["labels"], dtype=np.int64).reshape(-1)
        tensor = normalize_to_tensor(resize_image(image, self.size))
        return tensor, _as_output(target, boxes, labels, image.shape[:2])

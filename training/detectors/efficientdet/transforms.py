"""EfficientDet augmentation for the plain PyTorch DataLoader (the DALI pipeline implements the same).

Train (the TF EfficientDet input pipeline, as effdet's ``RandomResizePad``): horizontal flip (p = 0.5)
of the original image -> random scale jitter: draw ``f ~ U(scale_range)`` (EfficientDet: 0.1-2.0) and
resize the image so its longer side fits ``f * S`` (aspect kept) -> random crop of at most ``S x S``
(offset uniform over the overhang) -> paste top-left on an ``S x S`` canvas filled with the mean colour
-> scale to 0-1 and ImageNet-normalize. With ``f = 1`` and no flip this is exactly the evaluation
letterbox. Boxes follow every step; boxes left with a side under :data:`MIN_TRAIN_BOX_SIDE` network
pixels by the crop are dropped.

Evaluation: :func:`training.data.letterbox.letterbox_resize` (the service's geometry) + normalize.

Both take ``(image uint8 RGB [H, W, 3], target)`` from :class:`training.data.coco.CocoDetection`
(``boxes`` float32 ``[M, 4]`` xyxy pixels, ``labels`` int64 ``[M]``) and return ``(image float32
Tensor [3, S, S], target)`` with ``boxes`` a float32 Tensor ``[M', 4]`` x1, y1, x2, y2 **in pixels of
the network input** (EfficientDet's anchors are in pixels), ``labels`` int64 ``[M']``; evaluation adds
``letterbox`` (:class:`training.data.letterbox.Letterbox`). Other keys pass through; ``masks`` is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from contract.geometry import resize
from training.data.letterbox import letterbox_resize, mean_pad_value
from training.data.rng import WorkerRng
from training.detectors.ssd300.transforms import IMAGENET_MEAN, normalize_to_tensor

__all__ = [
    "EFFICIENTDET_PAD_VALUE",
    "MIN_TRAIN_BOX_SIDE",
    "SCALE_JITTER",
    "EfficientDetEvalTransform",
    "EfficientDetTrainTransform",
    "ScaleCrop",
    "check_scale_range",
    "random_scale_crop",
]

SCALE_JITTER = (0.1, 2.0)  # TF EfficientDet / effdet default
EFFICIENTDET_PAD_VALUE = mean_pad_value(IMAGENET_MEAN)  # (124, 116, 104)
MIN_TRAIN_BOX_SIDE = 1.0  # network pixels


def check_scale_range(scale_range: tuple[float, float]) -> None:
    """The scale jitter range (``--scale-jitter LOW HIGH``) must be two numbers 0 < low <= high."""
    if len(scale_range) != 2 or not 0 < scale_range[0] <= scale_range[1]:
        raise ValueError(f"scale jitter must be two numbers 0 < low <= high, got {tuple(scale_range)}")


@dataclass(frozen=True)
class ScaleCrop:
    """One draw of the scale jitter: resize ``(height, width)`` -> ``(scaled_h, scaled_w)``, then keep
    ``[offset_y : offset_y + S, offset_x : offset_x + S]`` of it at the canvas's top-left."""

    scaled_h: int
    scaled_w: int
    offset_y: int
    offset_x: int


def random_scale_crop(height: int, width: int, size: int, factor: float, u_y: float, u_x: float) -> ScaleCrop:
    """The jitter geometry for scale ``factor`` and uniform draws ``u_y, u_x`` in [0, 1) (see module doc)."""
    scale = min(factor * size / height, factor * size / width)
    # Rounded as the letterbox rounds, so factor 1 is exactly the evaluation letterbox.
    scaled_h, scaled_w = max(1, round(height * scale)), max(1, round(width * scale))
    offset_y = int(max(0, scaled_h - size) * u_y)
    offset_x = int(max(0, scaled_w - size) * u_x)
    return ScaleCrop(scaled_h, scaled_w, offset_y, offset_x)


def _resize(image: NDArray[np.uint8], width: int, height: int) -> NDArray[np.uint8]:
    return np.asarray(resize(image, width, height), dtype=np.uint8)


def _output(target: dict[str, Any], boxes: NDArray[np.float32], labels: NDArray[np.int64]) -> dict[str, Any]:
    out = {k: v for k, v in target.items() if k not in ("boxes", "labels", "masks")}
    out["boxes"] = torch.from_numpy(np.ascontiguousarray(boxes.reshape(-1, 4), dtype=np.float32))
    out["labels"] = torch.from_numpy(np.asarray(labels, dtype=np.int64).reshape(-1))
    return out


class EfficientDetTrainTransform:
    """Flip, scale jitter + crop, pad, normalize (see the module docstring).

    Randomness: a numpy Generator seeded from ``(seed, torch.initial_seed())``, re-created whenever
    ``torch.initial_seed()`` changes (each DataLoader worker and epoch gets its own reproducible stream,
    as :class:`training.detectors.ssd300.transforms.SSDTrainTransform`).
    """

    def __init__(
        self,
        size: int,
        scale_range: tuple[float, float] = SCALE_JITTER,
        pad_value: tuple[int, int, int] = EFFICIENTDET_PAD_VALUE,
        seed: int | None = None,
    ) -> None:
        check_scale_range(scale_range)
        self.size = size
        self.scale_range = scale_range
        self.pad_value = pad_value
        self.seed = seed
        self._generator = WorkerRng(seed)

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        rng = self._generator()
        size = self.size
        boxes = np.asarray(target["boxes"], dtype=np.float32).reshape(-1, 4).copy()
        labels = np.asarray(target["labels"], dtype=np.int64).reshape(-1)
        height, width = image.shape[:2]
        if rng.random() < 0.5:
            image = image[:, ::-1]
            boxes[:, [0, 2]] = width - boxes[:, [2, 0]]
        crop = random_scale_crop(
            height,
            width,
            size,
            float(rng.uniform(*self.scale_range)),
            float(rng.random()),
            float(rng.random()),
        )
        resized = _resize(np.ascontiguousarray(image), crop.scaled_w, crop.scaled_h)
        window = resized[crop.offset_y : crop.offset_y + size, crop.offset_x : crop.offset_x + size]
        canvas = np.empty((size, size, 3), dtype=np.uint8)
        canvas[...] = np.asarray(self.pad_value, dtype=np.uint8)
        canvas[: window.shape[0], : window.shape[1]] = window

        scale = np.array([crop.scaled_w / width, crop.scaled_h / height] * 2, dtype=np.float32)
        offset = np.array([crop.offset_x, crop.offset_y] * 2, dtype=np.float32)
        boxes = boxes * scale - offset
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, window.shape[1])
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, window.shape[0])
        keep = ((boxes[:, 2] - boxes[:, 0]) >= MIN_TRAIN_BOX_SIDE) & (
            (boxes[:, 3] - boxes[:, 1]) >= MIN_TRAIN_BOX_SIDE
        )
        return normalize_to_tensor(canvas), _output(target, boxes[keep], labels[keep])


class EfficientDetEvalTransform:
    """Letterbox to ``size x size`` (the service's geometry) and normalize; ``target["letterbox"]`` says
    how to map predictions back to the original image."""

    def __init__(self, size: int, pad_value: tuple[int, int, int] = EFFICIENTDET_PAD_VALUE) -> None:
        self.size = size
        self.pad_value = pad_value

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        canvas, geometry = letterbox_resize(image, self.size, self.size, self.pad_value)
        boxes = geometry.boxes_to_network(np.asarray(target["boxes"], dtype=np.float32))
        out = _output(target, boxes, np.asarray(target["labels"], dtype=np.int64))
        out["letterbox"] = geometry
        return normalize_to_tensor(canvas), out

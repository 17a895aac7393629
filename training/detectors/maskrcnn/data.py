"""Mask R-CNN's data pipeline (plain PyTorch): images, boxes and instance masks transformed together.

Why the pipeline resizes, not the model: the served graph sees an image letterboxed by the service
(OpenCV, area filter when shrinking) into a fixed ``S x S`` input. Training and evaluation resize the
same way (``training.data.letterbox``), so eager evaluation measures what the artifact will see, and the
resize runs in the DataLoader workers on uint8 data with the masks shrunk before they are batched. The
model's own transform then only normalizes and batches (``_skip_resize``, torchvision's switch for
pipelines that resize themselves).

Training (:class:`MaskRCNNTrainTransform`): horizontal flip (p = 0.5), then scale jitter: the long side
is resized to ``S * u``, ``u ~ U(jitter)``, keeping the aspect ratio; masks are resized with the image
(area/bilinear on 0/255, then > 127) and boxes scaled. No crop: every object stays whole.
Evaluation (:class:`MaskRCNNEvalTransform`): letterbox into ``S x S`` (the served geometry).

Batches:

- training: ``(images uint8 [B, Hb, Wb, 3], sizes [(h, w)] * B, targets)``, each image at the top-left of
  the padded batch, ``targets`` a list of ``{"boxes" float [M, 4] pixels, "labels" int64 [M] 1..C,
  "masks" uint8 [M, h, w]}``;
- evaluation: ``(images uint8 [B, S, S, 3], image_ids, letterboxes)``, a
  :class:`~training.data.letterbox.Letterbox` per image (how it maps back to the original).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor
from torch.utils.data import DataLoader

from contract.geometry import resize
from training.data.coco import CocoDetection
from training.data.letterbox import Letterbox, letterbox_geometry, letterbox_resize
from training.data.loader import LoaderRequest, TorchTrainLoader, ordered_loader
from training.data.rng import WorkerRng

TrainBatch = tuple[Tensor, list[tuple[int, int]], list[dict[str, Tensor]]]
EvalBatch = tuple[Tensor, list[int], list[Letterbox]]
DEFAULT_JITTER = (0.8, 1.2)


def resize_image(image: NDArray[np.uint8], height: int, width: int) -> NDArray[np.uint8]:
    """Resize to ``height x width`` with the letterbox's rule (area when shrinking, else bilinear)."""
    return np.asarray(resize(image, width, height), dtype=np.uint8)


def resize_masks(masks: NDArray[np.uint8], height: int, width: int) -> NDArray[np.uint8]:
    """uint8 0/1 ``[M, h, w]`` -> ``[M, height, width]``, resized like the image and re-thresholded."""
    if masks.shape[0] == 0:
        return np.zeros((0, height, width), dtype=np.uint8)
    out = np.empty((masks.shape[0], height, width), dtype=np.uint8)
    for i, mask in enumerate(masks):
        out[i] = resize_image(mask * np.uint8(255), height, width) > 127
    return out


class MaskRCNNTrainTransform:
    """Flip + scale jitter + resize of image, boxes and masks (see the module docstring).

    Input: ``(image uint8 [H, W, 3], target)`` from ``CocoDetection(..., with_masks=True)``. Output:
    ``(image uint8 Tensor [h, w, 3], target)`` with ``boxes``/``labels``/``masks`` as Tensors and the
    other keys passed through. Randomness as ``SSDTrainTransform``: a numpy Generator per worker and
    epoch, seeded from ``(seed, torch.initial_seed())``.
    """

    def __init__(
        self,
        image_size: int,
        jitter: tuple[float, float] = DEFAULT_JITTER,
        flip_probability: float = 0.5,
        seed: int | None = None,
    ) -> None:
        if not 0 < jitter[0] <= jitter[1]:
            raise ValueError(f"jitter must be 0 < low <= high, got {jitter}")
        self.image_size = image_size
        self.jitter = jitter
        self.flip_probability = flip_probability
        self.seed = seed
        self._generator = WorkerRng(seed)

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        rng = self._generator()
        boxes = np.asarray(target["boxes"], dtype=np.float32).reshape(-1, 4).copy()
        masks = np.asarray(target["masks"], dtype=np.uint8)
        height, width = image.shape[:2]
        if rng.random() < self.flip_probability:
            image = image[:, ::-1]
            masks = masks[:, :, ::-1]
            boxes[:, [0, 2]] = width - boxes[:, [2, 0]]
        side = max(32, round(self.image_size * rng.uniform(*self.jitter)))
        fitted = letterbox_geometry(height, width, side, side)
        new_h, new_w = fitted.resized_height, fitted.resized_width
        image = resize_image(np.ascontiguousarray(image), new_h, new_w)
        masks = resize_masks(np.ascontiguousarray(masks), new_h, new_w)
        boxes *= np.array([new_w / width, new_h / height] * 2, dtype=np.float32)
        out = {k: v for k, v in target.items() if k not in ("boxes", "labels", "masks")}
        out["boxes"] = torch.from_numpy(boxes)
        out["labels"] = torch.from_numpy(np.asarray(target["labels"], dtype=np.int64).reshape(-1))
        out["masks"] = torch.from_numpy(masks)
        return torch.from_numpy(np.ascontiguousarray(image)), out


class MaskRCNNEvalTransform:
    """Letterbox into the ``size x size`` network input; returns the image and its ``image_id`` and
    ``letterbox``."""

    def __init__(self, size: int, pad_value: tuple[int, int, int]) -> None:
        self.size = size
        self.pad_value = pad_value

    def __call__(self, image: NDArray[np.uint8], target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        canvas, letterbox = letterbox_resize(image, self.size, self.size, self.pad_value)
        return torch.from_numpy(canvas), {"image_id": target["image_id"], "letterbox": letterbox}


def collate_train(batch: Sequence[tuple[Tensor, dict[str, Any]]]) -> TrainBatch:
    """Pad images to the largest in the batch (rounded up to 32) at the top-left; keep their sizes."""
    sizes = [(int(image.shape[0]), int(image.shape[1])) for image, _ in batch]
    height = -(-max(h for h, _ in sizes) // 32) * 32
    width = -(-max(w for _, w in sizes) // 32) * 32
    images = torch.zeros((len(batch), height, width, 3), dtype=torch.uint8)
    for i, (image, _) in enumerate(batch):
        images[i, : image.shape[0], : image.shape[1]] = image
    targets = [{k: t[k] for k in ("boxes", "labels", "masks")} for _, t in batch]
    return images, sizes, targets


def collate_eval(batch: Sequence[tuple[Tensor, dict[str, Any]]]) -> EvalBatch:
    images = torch.stack([image for image, _ in batch])
    return images, [int(t["image_id"]) for _, t in batch], [t["letterbox"] for _, t in batch]


def maskrcnn_train_loader(
    request: LoaderRequest, image_size: int, jitter: tuple[float, float] = DEFAULT_JITTER
) -> TorchTrainLoader:
    """CocoDetection with masks + :class:`MaskRCNNTrainTransform` + :func:`collate_train` in the one torch
    loader (``training.data.loader``); images without usable annotations are skipped."""
    transform = MaskRCNNTrainTransform(image_size, jitter=jitter, seed=request.seed)
    dataset = CocoDetection(
        request.root, request.split, transforms=transform, with_masks=True, skip_empty=True
    )
    return TorchTrainLoader(dataset, collate_train, request)


def build_eval_loader(
    root: str | Path, split: str, size: int, pad_value: tuple[int, int, int], batch_size: int, workers: int
) -> DataLoader[Any]:
    """Every image of ``split`` in image-id order, letterboxed (see :data:`EvalBatch`)."""
    dataset = CocoDetection(root, split, transforms=MaskRCNNEvalTransform(size, pad_value))
    return ordered_loader(dataset, collate_eval, batch_size, workers)

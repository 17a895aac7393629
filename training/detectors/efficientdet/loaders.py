"""EfficientDet's training loader (DALI or plain PyTorch) and its letterbox evaluation loader.

Both training kinds yield the same triple (anchor labelling happens on the training device, in the loss):

- ``images`` float32 ``[N, 3, S, S]``: flipped, scale-jittered, cropped, mean-padded, ImageNet-normalized;
- ``boxes`` float32 ``[N, M, 4]``: x1, y1, x2, y2 in pixels of the ``S x S`` input, M = the most boxes of
  any image in the batch (at least 1); padding rows are zero;
- ``labels`` int64 ``[N, M]``: contiguous labels 1..C, -1 for padding (and boxes the crop removed).

The PyTorch kind is :class:`training.data.loader.TorchTrainLoader` (sampling, DDP sharding, per-epoch
seeding) with EfficientDet's transform and collate; see there for ``len()`` and ``set_epoch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from training.data.coco import CocoDetection
from training.data.letterbox import Letterbox
from training.data.loader import LoaderRequest, TorchTrainLoader, TrainLoader, choose_loader, ordered_loader
from training.detectors.efficientdet.transforms import (
    SCALE_JITTER,
    EfficientDetEvalTransform,
    EfficientDetTrainTransform,
)

__all__ = [
    "LetterboxEvalCollate",
    "PaddedBoxesCollate",
    "build_efficientdet_eval_loader",
    "efficientdet_train_loader",
]


class PaddedBoxesCollate:
    """Stack images; pad each image's boxes (zeros) and labels (-1) to the batch's largest count."""

    def __call__(self, batch: Sequence[tuple[Tensor, dict[str, Any]]]) -> tuple[Tensor, Tensor, Tensor]:
        images = torch.stack([image for image, _ in batch])
        most = max(1, max(int(t["labels"].numel()) for _, t in batch))
        boxes = torch.zeros((len(batch), most, 4), dtype=torch.float32)
        labels = torch.full((len(batch), most), -1, dtype=torch.int64)
        for i, (_, target) in enumerate(batch):
            count = int(target["labels"].numel())
            boxes[i, :count] = target["boxes"]
            labels[i, :count] = target["labels"]
        return images, boxes, labels


class LetterboxEvalCollate:
    """``(images [N, 3, S, S], image_ids list[int], letterboxes list[Letterbox])``."""

    def __call__(
        self, batch: Sequence[tuple[Tensor, dict[str, Any]]]
    ) -> tuple[Tensor, list[int], list[Letterbox]]:
        images = torch.stack([image for image, _ in batch])
        return images, [int(t["image_id"]) for _, t in batch], [t["letterbox"] for _, t in batch]


def efficientdet_train_loader(
    request: LoaderRequest, *, size: int, scale_range: tuple[float, float] = SCALE_JITTER
) -> TrainLoader:
    """The EfficientDet training loader of ``request.kind`` (see the module docstring for what it yields);
    ``size`` is the network's input side S."""
    r = request

    def torch_loader() -> TrainLoader:
        transforms = EfficientDetTrainTransform(size, scale_range, seed=r.seed)
        dataset = CocoDetection(r.root, r.split, transforms=transforms, skip_empty=True)
        return TorchTrainLoader(dataset, PaddedBoxesCollate(), r)

    def dali() -> TrainLoader:
        from training.detectors.efficientdet.dali import DaliEfficientDetLoader

        return DaliEfficientDetLoader(**r.dali_args(), size=size, scale_range=scale_range)

    return choose_loader(request, torch_loader, dali)


def build_efficientdet_eval_loader(
    root: str | Path, split: str, *, size: int, batch_size: int, workers: int
) -> DataLoader[Any]:
    """Every image of ``split`` in image-id order, letterboxed to ``size x size`` and normalized.

    Yields ``(images float32 [N, 3, S, S], image_ids list[int], letterboxes list[Letterbox])``.
    """
    dataset = CocoDetection(root, split, transforms=EfficientDetEvalTransform(size))
    return ordered_loader(dataset, LetterboxEvalCollate(), batch_size, workers)

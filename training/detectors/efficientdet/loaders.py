"""EfficientDet's training loader (DALI or plain PyTorch) and its letterbox evaluation loader.

Both training kinds yield the same triple (anchor labelling happens on the training device, in the loss):

- ``images`` float32 ``[N, 3, S, S]``: flipped, scale-jittered, cropped, mean-padded, ImageNet-normalized;
- ``boxes`` float32 ``[N, M, 4]``: x1, y1, x2, y2 in pixels of the ``S x S`` input, M = the most boxes of
  any image in the batch (at least 1); padding rows are zero;
- ``labels`` int64 ``[N, M]``: contiguous labels 1..C, -1 for padding (and boxes the crop removed).

The PyTorch kind is :class:`training.detectors.ssd300.loaders.TorchSSDLoader` (sampling, DDP sharding,
per-epoch seeding) with EfficientDet's transform and collate; see there for ``len()`` and ``set_epoch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from training.data.coco import CocoDetection
from training.data.letterbox import Letterbox
from training.detectors.efficientdet.transforms import (
    SCALE_JITTER,
    EfficientDetEvalTransform,
    EfficientDetTrainTransform,
)
from training.detectors.ssd300.loaders import SSDTrainLoader, TorchSSDLoader

__all__ = [
    "LetterboxEvalCollate",
    "PaddedBoxesCollate",
    "build_efficientdet_eval_loader",
    "build_efficientdet_train_loader",
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


def build_efficientdet_train_loader(
    kind: Literal["dali", "torch"],
    root: str | Path,
    split: str,
    *,
    size: int,
    batch_size: int,
    workers: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    scale_range: tuple[float, float] = SCALE_JITTER,
) -> SSDTrainLoader:
    """The EfficientDet training loader of the given kind (see the module docstring for what it yields).

    Args:
        kind: ``"dali"`` (GPU when CUDA is available, else DALI on the CPU) or ``"torch"`` (DataLoader).
        size: the network's input side S.
        workers: DALI CPU threads, or DataLoader worker processes.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    if kind == "torch":
        return TorchSSDLoader(
            root,
            split,
            batch_size,
            workers,
            seed,
            rank,
            world_size,
            transforms=EfficientDetTrainTransform(size, scale_range, seed=seed),
            collate_fn=PaddedBoxesCollate(),
        )
    if kind == "dali":
        from training.detectors.efficientdet.dali import DaliEfficientDetLoader

        return DaliEfficientDetLoader(
            root,
            split,
            batch_size,
            size=size,
            num_threads=max(1, workers),
            seed=seed,
            shard_id=rank,
            num_shards=world_size,
            device_id=torch.cuda.current_device() if torch.cuda.is_available() else None,
            scale_range=scale_range,
        )
    raise ValueError(f"unknown loader kind {kind!r}; expected 'dali' or 'torch'")


def build_efficientdet_eval_loader(
    root: str | Path, split: str, *, size: int, batch_size: int, workers: int
) -> DataLoader[Any]:
    """Every image of ``split`` in image-id order, letterboxed to ``size x size`` and normalized.

    Yields ``(images float32 [N, 3, S, S], image_ids list[int], letterboxes list[Letterbox])``.
    """
    dataset = CocoDetection(root, split, transforms=EfficientDetEvalTransform(size))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        collate_fn=LetterboxEvalCollate(),
        pin_memory=torch.cuda.is_available(),
    )

"""One entry point per use: the SSD300 training loader (DALI or plain PyTorch) and the evaluation loader.

Both training kinds yield the same triple, so the train loop does not know which one it has:

- ``images`` float32 ``[N, 3, 300, 300]``, RGB scaled to 0-1 then ImageNet-normalized;
- ``boxes`` float32 ``[N, 8732, 4]``, per default box the matched ground truth in centre form
  (cx, cy, w, h) normalized to 0-1, or the default box itself where unmatched;
- ``labels`` int64 ``[N, 8732]``, contiguous labels (0 = background).

Each has ``len()`` (full batches per epoch, the last partial batch dropped, equal on every DDP rank)
and ``set_epoch(epoch)`` (call before each epoch). The DALI kind yields tensors on its device
(``cuda:<current device>`` when CUDA is available, else the CPU); the torch kind yields CPU tensors
(pinned when CUDA is available).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import Tensor
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, Sampler

from training.data.coco import CocoDetection, Transform
from training.detectors.ssd300.default_boxes import default_boxes_xyxy
from training.detectors.ssd300.targets import assign_targets
from training.detectors.ssd300.transforms import SSDEvalTransform, SSDTrainTransform

__all__ = [
    "SSDEvalCollate",
    "SSDTrainCollate",
    "SSDTrainLoader",
    "TorchSSDLoader",
    "build_ssd_eval_loader",
    "build_ssd_train_loader",
]

SSD_SIZE = 300
Batch = tuple[Tensor, Tensor, Tensor]


class SSDTrainLoader(Protocol):
    """What the train loop relies on, whichever kind of loader it got."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Batch]: ...

    def set_epoch(self, epoch: int) -> None: ...


class SSDTrainCollate:
    """Stack transformed samples and match their boxes to the default boxes (runs in the workers).

    Input: ``(image [3, S, S], target)`` pairs from :class:`SSDTrainTransform`. Output: the training
    triple described in the module docstring, via :func:`assign_targets` (DALI ``box_encoder``'s rule).
    """

    def __init__(self, dboxes_xyxy: Tensor, iou_threshold: float = 0.5) -> None:
        self.dboxes_xyxy = dboxes_xyxy
        self.iou_threshold = iou_threshold

    def __call__(self, batch: Sequence[tuple[Tensor, dict[str, Any]]]) -> Batch:
        images = torch.stack([image for image, _ in batch])
        encoded = [
            assign_targets(t["boxes"], t["labels"], self.dboxes_xyxy, self.iou_threshold) for _, t in batch
        ]
        boxes = torch.stack([b for b, _ in encoded])
        labels = torch.stack([lab for _, lab in encoded])
        return images, boxes, labels


class SSDEvalCollate:
    """``(images [N, 3, S, S], image_ids list[int], orig_sizes list[(h, w)])``."""

    def __call__(
        self, batch: Sequence[tuple[Tensor, dict[str, Any]]]
    ) -> tuple[Tensor, list[int], list[tuple[int, int]]]:
        images = torch.stack([image for image, _ in batch])
        image_ids = [int(t["image_id"]) for _, t in batch]
        sizes = [(int(t["orig_size"][0]), int(t["orig_size"][1])) for _, t in batch]
        return images, image_ids, sizes


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    # Distinct per (seed, epoch, rank) and independent of how many epochs ran before (resumable).
    return (seed * 1_000_003 + epoch * 10_007 + rank) % (2**63)


class TorchSSDLoader:
    """The plain PyTorch training loader: CocoDetection + SSDTrainTransform + SSDTrainCollate.

    Images without usable boxes are skipped (as DALI's ``skip_empty``). With ``world_size > 1`` a
    :class:`DistributedSampler` (``drop_last=True``) gives each rank ``images // world_size`` samples.
    Other anchor-based detectors reuse it with their own ``transforms`` (same input/output contract as
    :class:`SSDTrainTransform`) and ``anchors_xyxy`` (``[A, 4]`` normalized; boxes and labels are then
    ``[N, A, 4]`` and ``[N, A]``), or their own ``collate_fn`` (which then decides what a batch is, e.g.
    EfficientDet's padded ground truth); the defaults are SSD300's.
    """

    def __init__(
        self,
        root: str | Path,
        split: str,
        batch_size: int,
        workers: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        *,
        transforms: Transform | None = None,
        anchors_xyxy: Tensor | None = None,
        collate_fn: Callable[[list[tuple[Tensor, dict[str, Any]]]], Batch] | None = None,
    ) -> None:
        self.dataset = CocoDetection(
            root, split, transforms=transforms or SSDTrainTransform(SSD_SIZE, seed), skip_empty=True
        )
        self.seed, self.rank = seed, rank
        # One generator drives the shuffle order (single process) and the workers' base seeds, which
        # seed the augmentation (see SSDTrainTransform); set_epoch reseeds it.
        self.generator = torch.Generator()
        self.generator.manual_seed(_epoch_seed(seed, 0, rank))
        self.sampler: Sampler[int]
        if world_size > 1:
            self.sampler = DistributedSampler(
                self.dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
            )
        else:
            self.sampler = RandomSampler(self.dataset, generator=self.generator)
        self.loader: DataLoader[Any] = DataLoader(
            self.dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            num_workers=workers,
            collate_fn=collate_fn
            or SSDTrainCollate(default_boxes_xyxy() if anchors_xyxy is None else anchors_xyxy),
            drop_last=True,
            pin_memory=torch.cuda.is_available(),
            generator=self.generator,
            persistent_workers=False,  # workers must be re-created to pick up each epoch's seeds
        )

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        if isinstance(self.sampler, DistributedSampler):
            self.sampler.set_epoch(epoch)
        self.generator.manual_seed(_epoch_seed(self.seed, epoch, self.rank))

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.loader)


def build_ssd_train_loader(
    kind: Literal["dali", "torch"],
    root: str | Path,
    split: str,
    batch_size: int,
    workers: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
) -> SSDTrainLoader:
    """The SSD300 training loader of the given kind (see the module docstring for what it yields).

    Args:
        kind: ``"dali"`` (DALI pipeline; GPU when CUDA is available) or ``"torch"`` (DataLoader).
        root, split: a COCO-layout dataset (see :func:`training.data.coco.resolve_split`).
        batch_size: per-rank batch size.
        workers: DALI CPU threads, or DataLoader worker processes.
        seed: shuffling and augmentation seed.
        rank, world_size: this process's shard for DistributedDataParallel.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    if kind == "torch":
        return TorchSSDLoader(root, split, batch_size, workers, seed, rank, world_size)
    if kind == "dali":
        from training.data.dali_ssd import DaliSSDLoader

        device_id = torch.cuda.current_device() if torch.cuda.is_available() else None
        return DaliSSDLoader(
            root,
            split,
            batch_size,
            num_threads=max(1, workers),
            seed=seed,
            shard_id=rank,
            num_shards=world_size,
            device_id=device_id,
        )
    raise ValueError(f"unknown loader kind {kind!r}; expected 'dali' or 'torch'")


def build_ssd_eval_loader(
    root: str | Path, split: str, batch_size: int, workers: int, size: int = SSD_SIZE
) -> DataLoader[Any]:
    """Every image of ``split`` in image-id order, resized to ``size x size`` (300) and normalized.

    Yields ``(images float32 [N, 3, size, size], image_ids list[int], orig_sizes list[(height, width)])``;
    the dataset (with its pycocotools ``coco`` index and ``label_map``) is ``loader.dataset``.
    """
    dataset = CocoDetection(root, split, transforms=SSDEvalTransform(size))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        collate_fn=SSDEvalCollate(),
        pin_memory=torch.cuda.is_available(),
    )

"""The one PyTorch training loader every architecture uses, and the choice between it and DALI.

:class:`TorchTrainLoader` wraps a dataset and a collate function: shuffled (one seeded generator drives
the order and the workers' base seeds, which seed the augmentation; see :func:`training.data.rng.worker_rng`),
sharded with a :class:`DistributedSampler` (``drop_last=True``) when ``world_size > 1``, the last partial
batch dropped (``len()`` is equal on every DDP rank). Call ``set_epoch(epoch)`` before each epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler

__all__ = [
    "LoaderRequest",
    "TorchTrainLoader",
    "TrainLoader",
    "choose_loader",
    "epoch_seed",
    "ordered_loader",
]

LOADER_KINDS = ("dali", "torch")


class TrainLoader(Protocol):
    """What the train loop relies on, whichever kind of loader it got."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def set_epoch(self, epoch: int) -> None: ...


@dataclass(frozen=True)
class LoaderRequest:
    """What every architecture's training loader takes.

    ``kind``: ``"dali"`` (DALI pipeline; GPU when CUDA is available) or ``"torch"`` (DataLoader);
    ``root``, ``split``: a COCO-layout dataset (see :func:`training.data.coco.resolve_split`);
    ``batch_size`` per rank; ``workers``: DALI CPU threads, or DataLoader worker processes; ``seed``:
    shuffling and augmentation; ``rank``, ``world_size``: this process's shard for DDP.
    """

    kind: str
    root: str | Path
    split: str
    batch_size: int
    workers: int
    seed: int
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside 0..{self.world_size - 1}")

    def dali_args(self) -> dict[str, Any]:
        """The shared arguments of a DALI loader (``training.data.dali.DaliLoader``) for this request: its
        ``workers`` are DALI's CPU threads, and the pipeline runs on the current GPU when there is one."""
        return {
            "root": self.root,
            "split": self.split,
            "batch_size": self.batch_size,
            "num_threads": max(1, self.workers),
            "seed": self.seed,
            "shard_id": self.rank,
            "num_shards": self.world_size,
            "device_id": torch.cuda.current_device() if torch.cuda.is_available() else None,
        }


def choose_loader(
    request: LoaderRequest,
    torch_loader: Callable[[], TrainLoader],
    dali_loader: Callable[[], TrainLoader] | None = None,
) -> TrainLoader:
    """The loader of ``request.kind``: the torch one, or the DALI one (where the architecture has it)."""
    if request.kind == "torch":
        return torch_loader()
    if request.kind == "dali" and dali_loader is not None:
        return dali_loader()
    raise ValueError(f"unknown loader kind {request.kind!r}; expected 'dali' or 'torch'")


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    # Distinct per (seed, epoch, rank) and independent of how many epochs ran before (resumable).
    return (seed * 1_000_003 + epoch * 10_007 + rank) % (2**63)


class TorchTrainLoader:
    """A shuffled, sharded, per-epoch reseeded DataLoader over ``dataset`` (see the module docstring);
    ``request`` gives the batch size, workers, seed and shard (its ``kind``, root and split are the
    caller's business)."""

    def __init__(
        self, dataset: Dataset[Any], collate_fn: Callable[[list[Any]], Any], request: LoaderRequest
    ) -> None:
        self.dataset = dataset
        seed, rank, world_size = request.seed, request.rank, request.world_size
        self.seed, self.rank = seed, rank
        self.generator = torch.Generator()
        self.generator.manual_seed(epoch_seed(seed, 0, rank))
        self.sampler: Sampler[int]
        if world_size > 1:
            self.sampler = DistributedSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
            )
        else:
            self.sampler = RandomSampler(dataset, generator=self.generator)  # type: ignore[arg-type]
        self.loader: DataLoader[Any] = DataLoader(
            dataset,
            batch_size=request.batch_size,
            sampler=self.sampler,
            num_workers=request.workers,
            collate_fn=collate_fn,
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
        self.generator.manual_seed(epoch_seed(self.seed, epoch, self.rank))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


def ordered_loader(
    dataset: Dataset[Any], collate_fn: Callable[[list[Any]], Any], batch_size: int, workers: int
) -> DataLoader[Any]:
    """Every sample of ``dataset`` once, in order (evaluation)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=torch.cuda.is_available(),
    )

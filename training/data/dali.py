"""What every DALI training pipeline here shares: the COCO reader, the normalization, and the loader that
turns a built pipeline into torch batches.

Devices: ``device_id=None`` builds a CPU-only pipeline (DALI 2.x: no CUDA context is touched); an integer
decodes with nvJPEG (``mixed``) on that GPU and runs the pixel operators there. Box operators always run
on the CPU (they are cheap, and NVIDIA's pipeline does the same).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.data.coco import MIN_BOX_SIDE, resolve_split
from training.data.imagenet import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "READER_NAME",
    "DaliLoader",
    "DaliShard",
    "coco_reader",
    "dali_available",
    "normalize_chw",
    "pipeline_args",
    "shard_seed",
]

READER_NAME = "Reader"
# Every training pipeline returns these, per sample.
OUTPUTS = ("images", "boxes", "labels", "image_ids")


def dali_available() -> bool:
    """Whether ``nvidia.dali`` imports (it is in the ``train`` extra; serving images lack it)."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def shard_seed(seed: int, shard_id: int) -> int:
    """Shards draw different augmentations; the seed must fit DALI's signed 64-bit seed."""
    return (seed + shard_id) % (2**63)


def coco_reader(
    images_dir: str | Path,
    annotation_file: str | Path,
    shard: DaliShard,
    *,
    shuffle: bool,
) -> tuple[Any, Any, Any, Any]:
    """DALI's COCO reader as every training pipeline here uses it, inside a ``pipeline_def``:
    ``(jpegs, boxes ltrb 0-1, labels, image_ids)``, crowd and tiny boxes dropped, images without boxes
    skipped (as :class:`~training.data.coco.CocoDetection`)."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    dali_math: Any = importlib.import_module("nvidia.dali.math")
    jpegs, boxes, labels, image_ids = fn.readers.coco(
        name=READER_NAME,
        file_root=str(images_dir),
        annotations_file=str(annotation_file),
        ratio=True,
        ltrb=True,
        skip_empty=True,
        include_iscrowd=False,  # CocoDetection skips crowd boxes too
        size_threshold=MIN_BOX_SIDE,
        image_ids=True,
        shard_id=shard.shard_id,
        num_shards=shard.num_shards,
        random_shuffle=shuffle,
    )
    # Annotations may stick out of the image (COCO has a few); the box operators assert on [0, 1].
    # CocoDetection clips the same way.
    return jpegs, dali_math.clamp(boxes, 0.0, 1.0), labels, image_ids


def pipeline_args(shard: DaliShard) -> dict[str, Any]:
    """``pipeline_def``'s arguments for ``shard``."""
    return {
        "batch_size": shard.batch_size,
        "num_threads": shard.num_threads,
        "device_id": shard.device_id,
        "seed": shard.seed,
    }


def normalize_chw(images: Any, mirror: Any = 0) -> Any:
    """DALI graph node: 0-255 HWC images (optionally mirrored) -> float32 CHW with ImageNet mean/std."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    return fn.crop_mirror_normalize(
        images,
        mirror=mirror,
        mean=[255.0 * m for m in IMAGENET_MEAN],
        std=[255.0 * s for s in IMAGENET_STD],
        dtype=types.FLOAT,
        output_layout="CHW",
    )


@dataclass(frozen=True)
class DaliShard:
    """How one process's pipeline runs: its batch size, CPU threads, this shard's seed and place among
    ``num_shards``, and its GPU (``device_id=None``: CPU only)."""

    batch_size: int
    num_threads: int
    seed: int
    shard_id: int = 0
    num_shards: int = 1
    device_id: int | None = None


class DaliLoader:
    """A built training pipeline (outputs :data:`OUTPUTS`) as torch batches ``(images, boxes, labels)``.

    Subclasses name their pipeline builder, ``build(images_dir, annotation_file, shard, **options)``; the
    constructor's keyword ``options`` go to it. An epoch is ``len(self)`` full batches:
    ``(images // num_shards) // batch_size`` (DALI's DROP policy), the same on every shard so DDP ranks
    stay in step. DALI's reader reshuffles by itself every epoch. Shuffling is DALI's (``random_shuffle``
    with its 1024-sample buffer), seeded by ``seed + shard_id``.
    """

    build: Callable[..., Any]

    def __init__(
        self,
        root: str | Path,
        split: str,
        batch_size: int,
        num_threads: int = 2,
        seed: int = 0,
        shard_id: int = 0,
        num_shards: int = 1,
        device_id: int | None = None,
        **options: Any,
    ) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy  # type: ignore[attr-defined]  # re-exported without __all__

        if not 0 <= shard_id < num_shards:
            raise ValueError(f"shard_id {shard_id} is outside 0..{num_shards - 1}")
        images_dir, annotation_file = resolve_split(root, split)
        self.batch_size, self.device_id = batch_size, device_id
        shard = DaliShard(
            batch_size, num_threads, shard_seed(seed, shard_id), shard_id, num_shards, device_id
        )
        self._pipe = type(self).build(images_dir, annotation_file, shard, **options)
        self._pipe.build()
        self._iterator = DALIGenericIterator(
            [self._pipe],
            list(OUTPUTS),
            reader_name=READER_NAME,
            last_batch_policy=LastBatchPolicy.DROP,
            auto_reset=True,
        )
        self.epoch = 0
        # For inspection and tests: which images made the batch just yielded.
        self.last_image_ids: list[int] = []

    def __len__(self) -> int:
        return len(self._iterator)

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch; DALI's reader reshuffles by itself every epoch, so nothing else changes."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        for batch in self._iterator:
            data = batch[0]
            self.last_image_ids = [int(i) for i in data["image_ids"].reshape(-1).tolist()]
            yield data["images"], data["boxes"], data["labels"].to(torch.int64)

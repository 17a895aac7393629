"""EfficientDet training input in NVIDIA DALI: the augmentation of
``training.detectors.efficientdet.transforms``.

COCO reader (ratio, ltrb, skip empty, no crowd) -> decode -> horizontal flip p = 0.5 (image and boxes)
-> scale jitter: ``f ~ U(scale_range)``, resize so the longer side fits ``f * S`` (aspect kept, sizes
rounded as the letterbox rounds) -> crop an ``S x S`` window at a uniform offset into the overhang,
padding past the image with the mean colour (``fn.slice`` with ``out_of_bounds_policy="pad"``: the image
stays top-left) -> normalize to float CHW with ImageNet mean/std. With ``augment=False`` (f = 1, no flip)
it is the evaluation letterbox.

Boxes leave in pixels of the ``S x S`` input (EfficientDet's anchors are in pixels), clipped to the kept
window; boxes thinner than ``MIN_TRAIN_BOX_SIDE`` get label -1 (ignored by the anchor labeller). Per batch,
boxes and labels are padded to the largest count (boxes with zeros, labels with -1): the same
``(images, boxes, labels)`` triple as the PyTorch loader. Anchor labelling happens on the training
device, in the task's loss (as NVIDIA's PyTorch EfficientDet does after its DALI pipeline).

Devices: ``device_id=None`` builds a CPU-only pipeline; an integer decodes with nvJPEG (``mixed``) and
runs the pixel operators on that GPU. The geometry arithmetic and box operators run on the CPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.data.coco import resolve_split
from training.data.dali_ssd import READER_NAME, coco_reader
from training.detectors.efficientdet.transforms import (
    EFFICIENTDET_PAD_VALUE,
    MIN_TRAIN_BOX_SIDE,
    SCALE_JITTER,
    check_scale_range,
)
from training.detectors.ssd300.transforms import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["DaliEfficientDetLoader", "build_efficientdet_train_pipeline"]

_OUTPUTS = ("images", "boxes", "labels", "image_ids")


def build_efficientdet_train_pipeline(
    images_dir: str | Path,
    annotation_file: str | Path,
    *,
    size: int,
    batch_size: int,
    num_threads: int,
    seed: int,
    shard_id: int = 0,
    num_shards: int = 1,
    device_id: int | None = None,
    scale_range: tuple[float, float] = SCALE_JITTER,
    augment: bool = True,
    shuffle: bool = True,
) -> Any:
    """The (not yet built) DALI pipeline.

    Outputs per sample: ``images`` float32 ``[3, S, S]`` normalized; ``boxes`` float32 ``[M, 4]`` x1, y1,
    x2, y2 network pixels; ``labels`` int32 ``[M]`` (1..C; -1 = dropped or padding); ``image_ids`` int32
    ``[1]``.
    """
    check_scale_range(scale_range)
    # DALI's type stubs model neither multi-output operators nor ``device_id=None``: use it untyped.
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    dali_math: Any = importlib.import_module("nvidia.dali.math")
    pipeline_def: Any = importlib.import_module("nvidia.dali").pipeline_def
    on_gpu = device_id is not None

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    def pipeline() -> tuple[Any, ...]:
        jpegs, boxes, labels, image_ids = coco_reader(
            images_dir, annotation_file, shard_id=shard_id, num_shards=num_shards, shuffle=shuffle
        )
        shape = fn.peek_image_shape(jpegs)  # [H, W, C]
        height = fn.cast(shape[0], dtype=types.FLOAT)
        width = fn.cast(shape[1], dtype=types.FLOAT)
        images = fn.decoders.image(
            jpegs, device="mixed" if on_gpu else "cpu", output_type=types.RGB, adjust_orientation=False
        )
        if augment:
            flip = fn.random.coin_flip(probability=0.5)
            images = fn.flip(images, horizontal=flip)
            boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
            factor = fn.random.uniform(range=list(scale_range))
            u_y = fn.random.uniform(range=[0.0, 1.0])
            u_x = fn.random.uniform(range=[0.0, 1.0])
        else:
            factor, u_y, u_x = 1.0, 0.0, 0.0
        # training.detectors.efficientdet.transforms.random_scale_crop, in DALI arithmetic.
        scale = dali_math.min(factor * size / height, factor * size / width)
        scaled_h = dali_math.max(dali_math.floor(height * scale + 0.5), 1.0)
        scaled_w = dali_math.max(dali_math.floor(width * scale + 0.5), 1.0)
        offset_y = dali_math.floor(dali_math.max(scaled_h - size, 0.0) * u_y)
        offset_x = dali_math.floor(dali_math.max(scaled_w - size, 0.0) * u_x)
        images = fn.resize(images, resize_x=scaled_w, resize_y=scaled_h)
        images = fn.slice(
            images,
            start=fn.cast(fn.stack(offset_x, offset_y), dtype=types.INT32),
            shape=[size, size],
            axis_names="WH",
            out_of_bounds_policy="pad",
            fill_values=list(EFFICIENTDET_PAD_VALUE),
        )
        images = fn.crop_mirror_normalize(
            images,
            mean=[255.0 * m for m in IMAGENET_MEAN],
            std=[255.0 * s for s in IMAGENET_STD],
            dtype=types.FLOAT,
            output_layout="CHW",
        )
        # Boxes: relative to the original -> pixels of the scaled image -> of the window, clipped.
        boxes = boxes * fn.stack(scaled_w, scaled_h, scaled_w, scaled_h) - fn.stack(
            offset_x, offset_y, offset_x, offset_y
        )
        limit_x = dali_math.min(scaled_w - offset_x, float(size))
        limit_y = dali_math.min(scaled_h - offset_y, float(size))
        boxes = dali_math.clamp(boxes, 0.0, float(size))
        boxes = dali_math.min(boxes, fn.stack(limit_x, limit_y, limit_x, limit_y))
        valid = (boxes[:, 2] - boxes[:, 0] >= MIN_TRAIN_BOX_SIDE) & (
            boxes[:, 3] - boxes[:, 1] >= MIN_TRAIN_BOX_SIDE
        )
        valid = fn.cast(valid, dtype=types.INT32)
        labels = labels * valid + (valid - 1)  # -1 where dropped
        boxes = fn.pad(boxes, axes=(0,), fill_value=0.0)
        labels = fn.pad(labels, axes=(0,), fill_value=-1)
        if on_gpu:
            boxes, labels = boxes.gpu(), labels.gpu()
        return images, boxes, labels, image_ids

    return pipeline()


class DaliEfficientDetLoader:
    """Batches of EfficientDet training data from DALI, as torch tensors.

    Yields ``(images float32 [N, 3, S, S], boxes float32 [N, M, 4] xyxy network pixels, labels int64
    [N, M])`` (padding: zero boxes, label -1) on ``cuda:device_id`` or the CPU. An epoch is
    ``(images // num_shards) // batch_size`` full batches (DALI's DROP policy), equal on every shard.
    """

    def __init__(
        self,
        root: str | Path,
        split: str,
        batch_size: int,
        *,
        size: int,
        num_threads: int = 2,
        seed: int = 0,
        shard_id: int = 0,
        num_shards: int = 1,
        device_id: int | None = None,
        scale_range: tuple[float, float] = SCALE_JITTER,
        augment: bool = True,
        shuffle: bool = True,
    ) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        if not 0 <= shard_id < num_shards:
            raise ValueError(f"shard_id {shard_id} is outside 0..{num_shards - 1}")
        images_dir, annotation_file = resolve_split(root, split)
        self._pipe = build_efficientdet_train_pipeline(
            images_dir,
            annotation_file,
            size=size,
            batch_size=batch_size,
            num_threads=num_threads,
            seed=(seed + shard_id) % (2**63),
            shard_id=shard_id,
            num_shards=num_shards,
            device_id=device_id,
            scale_range=scale_range,
            augment=augment,
            shuffle=shuffle,
        )
        self._pipe.build()
        self._iterator = DALIGenericIterator(
            [self._pipe],
            list(_OUTPUTS),
            reader_name=READER_NAME,
            last_batch_policy=LastBatchPolicy.DROP,
            auto_reset=True,
        )
        self.epoch = 0
        self.last_image_ids: list[int] = []

    def __len__(self) -> int:
        return len(self._iterator)

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch; DALI's reader reshuffles by itself every epoch."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        for batch in self._iterator:
            data = batch[0]
            self.last_image_ids = [int(i) for i in data["image_ids"].reshape(-1).tolist()]
            yield data["images"], data["boxes"], data["labels"].to(torch.int64)

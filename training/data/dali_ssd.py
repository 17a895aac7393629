"""SSD300 training input pipeline in NVIDIA DALI (NVIDIA DeepLearningExamples' COCOPipeline semantics).

COCO reader (ratio, ltrb, skip empty, no crowd) -> SSD random IoU crop fused into the decoder
(``decoders.image_slice``) -> horizontal flip p = 0.5 (image flip folded into ``crop_mirror_normalize``,
boxes by ``bb_flip``) -> resize to 300x300 -> ``hsv`` + ``brightness_contrast`` -> normalize to float CHW
with ImageNet mean/std -> ``box_encoder`` against the SSD300 default boxes.

Devices: ``device_id=None`` builds a CPU-only pipeline (DALI 2.x: no CUDA context is touched); an integer
decodes with nvJPEG (``mixed``) on that GPU and runs the pixel operators there. Box operators always run
on the CPU (they are cheap, and NVIDIA's pipeline does the same).

Labels: DALI's reader maps category ids to 1..C in the order of the annotation file's ``categories``
list, the same rule as :class:`training.data.labels.LabelMap` (checked by the tests), so no remapping is
needed. ``box_encoder`` takes ltrb boxes and anchors but, despite its docstring, writes its output in
centre form (cx, cy, w, h) -- the form the SSD loss wants (as NVIDIA's trainer relies on; the tests pin it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.data.coco import MIN_BOX_SIDE, resolve_split
from training.detectors.ssd300.default_boxes import default_boxes_xyxy
from training.detectors.ssd300.transforms import (
    BRIGHTNESS,
    CONTRAST,
    CROP_ASPECT,
    CROP_SCALING,
    HUE_DEGREES,
    IMAGENET_MEAN,
    IMAGENET_STD,
    IOU_CROP_OPTIONS,
    SATURATION,
)

__all__ = ["DaliSSDLoader", "build_ssd_train_pipeline", "dali_available"]

READER_NAME = "Reader"
_OUTPUTS = ("images", "boxes", "labels", "image_ids")


def dali_available() -> bool:
    """Whether ``nvidia.dali`` imports (it is in the ``train`` extra; serving images lack it)."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def coco_reader(
    images_dir: str | Path,
    annotation_file: str | Path,
    *,
    shard_id: int,
    num_shards: int,
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
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=shuffle,
    )
    # Annotations may stick out of the image (COCO has a few); the box operators assert on [0, 1].
    # CocoDetection clips the same way.
    return jpegs, dali_math.clamp(boxes, 0.0, 1.0), labels, image_ids


def build_ssd_train_pipeline(
    images_dir: str | Path,
    annotation_file: str | Path,
    *,
    batch_size: int,
    num_threads: int,
    seed: int,
    shard_id: int = 0,
    num_shards: int = 1,
    device_id: int | None = None,
    size: int = 300,
    augment: bool = True,
    shuffle: bool = True,
    anchors_ltrb: Sequence[float] | None = None,
) -> Any:
    """The (not yet built) DALI pipeline.

    Outputs per sample: ``images`` float32 ``[3, size, size]`` normalized; ``boxes`` float32 ``[A, 4]``
    cx, cy, w, h 0-1 (matched ground truth, or the anchor itself where unmatched); ``labels`` int32 ``[A]``
    (0 = background); ``image_ids`` int32 ``[1]``. ``augment=False`` skips crop, flip and colour twist
    (used to compare with the PyTorch path); ``shuffle=False`` reads in image-id order.
    """
    # DALI's type stubs model neither multi-output operators nor ``device_id=None``: use it untyped.
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    pipeline_def: Any = importlib.import_module("nvidia.dali").pipeline_def

    anchors = list(anchors_ltrb) if anchors_ltrb is not None else default_boxes_xyxy().flatten().tolist()
    on_gpu = device_id is not None
    thresholds = [t for t in IOU_CROP_OPTIONS if t is not None]

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    def pipeline() -> tuple[Any, ...]:
        jpegs, boxes, labels, image_ids = coco_reader(
            images_dir, annotation_file, shard_id=shard_id, num_shards=num_shards, shuffle=shuffle
        )
        decoder = "mixed" if on_gpu else "cpu"
        if augment:
            crop_begin, crop_size, boxes, labels = fn.random_bbox_crop(
                boxes,
                labels,
                device="cpu",
                aspect_ratio=list(CROP_ASPECT),
                thresholds=thresholds,
                scaling=list(CROP_SCALING),
                bbox_layout="xyXY",
                allow_no_crop=True,
                num_attempts=1,
            )
            # Decoding only the crop window saves the work of decoding pixels that are thrown away.
            images = fn.decoders.image_slice(
                jpegs,
                crop_begin,
                crop_size,
                device=decoder,
                output_type=types.RGB,
                adjust_orientation=False,  # annotations refer to stored pixels, as in CocoDetection
            )
            flip = fn.random.coin_flip(probability=0.5)
            boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        else:
            images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, adjust_orientation=False)
            flip = 0
        images = fn.resize(images, resize_x=size, resize_y=size)
        if augment:
            images = fn.hsv(
                images,
                hue=fn.random.uniform(range=list(HUE_DEGREES)),
                saturation=fn.random.uniform(range=list(SATURATION)),
                dtype=types.FLOAT,  # keep the intermediate unclipped and unquantized
            )
            images = fn.brightness_contrast(
                images,
                brightness=fn.random.uniform(range=list(BRIGHTNESS)),
                contrast=fn.random.uniform(range=list(CONTRAST)),
                contrast_center=128.0,  # pixels are 0-255 here
                dtype=types.UINT8,
            )
        images = fn.crop_mirror_normalize(
            images,
            mirror=flip,
            mean=[255.0 * m for m in IMAGENET_MEAN],
            std=[255.0 * s for s in IMAGENET_STD],
            dtype=types.FLOAT,
            output_layout="CHW",
        )
        boxes, labels = fn.box_encoder(boxes, labels, criteria=0.5, anchors=anchors)
        if on_gpu:
            boxes, labels = boxes.gpu(), labels.gpu()
        return images, boxes, labels, image_ids

    return pipeline()


class DaliSSDLoader:
    """Batches of SSD300 training data from DALI, as torch tensors.

    Yields ``(images, boxes, labels)``: ``images`` float32 ``[N, 3, 300, 300]`` normalized,
    ``boxes`` float32 ``[N, 8732, 4]`` centre form (cx, cy, w, h) normalized to 0-1, ``labels`` int64
    ``[N, 8732]`` (0 = background). Tensors are on ``cuda:device_id`` or on the CPU when
    ``device_id is None``.

    An epoch is ``len(self)`` full batches: ``(images // num_shards) // batch_size`` (DALI's DROP policy),
    the same on every shard so DDP ranks stay in step. Shuffling is DALI's (``random_shuffle`` with its
    1024-sample buffer), seeded by ``seed + shard_id``.
    """

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
        *,
        size: int = 300,
        augment: bool = True,
        shuffle: bool = True,
        pipeline: Callable[..., Any] | None = None,
        anchors_xyxy: Tensor | None = None,
    ) -> None:
        """``pipeline`` (default :func:`build_ssd_train_pipeline`) lets another anchor-based detector run
        its own augmentation through this loader (same signature and outputs, e.g.
        :func:`training.detectors.ssd320.dali.build_ssd320_train_pipeline`); ``anchors_xyxy`` ``[A, 4]``
        (normalized) replaces the SSD300 default boxes in the box encoder."""
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        if not 0 <= shard_id < num_shards:
            raise ValueError(f"shard_id {shard_id} is outside 0..{num_shards - 1}")
        images_dir, annotation_file = resolve_split(root, split)
        self.batch_size = batch_size
        self.device_id = device_id
        self.epoch = 0
        build = pipeline or build_ssd_train_pipeline
        self._pipe = build(
            images_dir,
            annotation_file,
            batch_size=batch_size,
            num_threads=num_threads,
            # Shards draw different augmentations; the seed must fit DALI's signed 64-bit seed.
            seed=(seed + shard_id) % (2**63),
            shard_id=shard_id,
            num_shards=num_shards,
            device_id=device_id,
            size=size,
            augment=augment,
            shuffle=shuffle,
            anchors_ltrb=None if anchors_xyxy is None else anchors_xyxy.flatten().tolist(),
        )
        self._pipe.build()
        self._iterator = DALIGenericIterator(
            [self._pipe],
            list(_OUTPUTS),
            reader_name=READER_NAME,
            last_batch_policy=LastBatchPolicy.DROP,
            auto_reset=True,
        )
        self.last_image_ids: list[int] = []

    def __len__(self) -> int:
        return len(self._iterator)

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch. DALI's reader reshuffles by itself every epoch, so nothing else changes."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        for batch in self._iterator:
            data = batch[0]
            # For inspection and tests: which images made the batch just yielded.
            self.last_image_ids = [int(i) for i in data["image_ids"].reshape(-1).tolist()]
            yield data["images"], data["boxes"], data["labels"].to(torch.int64)

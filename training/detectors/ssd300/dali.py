"""SSD-style training input in NVIDIA DALI (NVIDIA DeepLearningExamples' COCOPipeline semantics).

COCO reader (ratio, ltrb, skip empty, no crowd) -> a random crop fused into the decoder
(``decoders.image_slice``; SSD300's IoU crop by default, or another :class:`DaliCrop` such as SSD320's TF
crop) -> horizontal flip p = 0.5 (image flip folded into ``crop_mirror_normalize``, boxes by ``bb_flip``)
-> resize to ``size x size`` -> optionally ``hsv`` + ``brightness_contrast`` (SSD300's colour twist) ->
normalize to float CHW with ImageNet mean/std -> ``box_encoder`` against the anchors (SSD300's default
boxes unless given). Devices and the reader: :mod:`training.data.dali`.

Labels: DALI's reader maps category ids to 1..C in the order of the annotation file's ``categories``
list, the same rule as :class:`training.data.labels.LabelMap` (checked by the tests), so no remapping is
needed. ``box_encoder`` takes ltrb boxes and anchors but, despite its docstring, writes its output in
centre form (cx, cy, w, h) -- the form the SSD loss wants (as NVIDIA's trainer relies on; the tests pin it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from torch import Tensor

from training.data.dali import (
    DaliLoader,
    DaliShard,
    coco_reader,
    dali_available,
    normalize_chw,
    pipeline_args,
)
from training.detectors.ssd300.default_boxes import default_boxes_xyxy
from training.detectors.ssd300.transforms import (
    BRIGHTNESS,
    CONTRAST,
    CROP_ASPECT,
    CROP_SCALING,
    HUE_DEGREES,
    IOU_CROP_OPTIONS,
    SATURATION,
)

__all__ = ["IOU_CROP", "DaliCrop", "DaliSSDLoader", "build_ssd_train_pipeline", "dali_available"]


@dataclass(frozen=True)
class DaliCrop:
    """A random crop as DALI graph nodes: ``window(jpegs, boxes, labels)`` -> ``(crop_begin, crop_size,
    boxes, labels)`` (boxes ltrb ratios of the crop); ``in_pixels``: the window is in pixels, else in
    ratios of the image."""

    window: Callable[[Any, Any, Any], tuple[Any, Any, Any, Any]]
    in_pixels: bool = False


def ssd_iou_crop(jpegs: Any, boxes: Any, labels: Any) -> tuple[Any, Any, Any, Any]:
    """SSD's random IoU crop (``training.detectors.ssd300.transforms.random_iou_crop``) in DALI."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    return cast(
        "tuple[Any, Any, Any, Any]",
        fn.random_bbox_crop(
            boxes,
            labels,
            device="cpu",
            aspect_ratio=list(CROP_ASPECT),
            thresholds=[t for t in IOU_CROP_OPTIONS if t is not None],
            scaling=list(CROP_SCALING),
            bbox_layout="xyXY",
            allow_no_crop=True,
            num_attempts=1,
        ),
    )


IOU_CROP = DaliCrop(ssd_iou_crop)


def _decode_cropped(jpegs: Any, boxes: Any, labels: Any, crop: DaliCrop, on_gpu: bool) -> tuple[Any, ...]:
    """Crop (decoding only the window saves decoding pixels that are thrown away), then draw the flip:
    ``(images, boxes, labels, flip)``; the image flip is left to :func:`normalize_chw`."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    crop_begin, crop_size, boxes, labels = crop.window(jpegs, boxes, labels)
    pixels = {"normalized_anchor": False, "normalized_shape": False} if crop.in_pixels else {}
    images = fn.decoders.image_slice(
        jpegs,
        crop_begin,
        crop_size,
        **pixels,
        device="mixed" if on_gpu else "cpu",
        output_type=types.RGB,
        adjust_orientation=False,  # annotations refer to stored pixels, as in CocoDetection
    )
    flip = fn.random.coin_flip(probability=0.5)
    return images, fn.bb_flip(boxes, ltrb=True, horizontal=flip), labels, flip


def _color_twist(images: Any) -> Any:
    """SSD300's colour augmentation: random hue and saturation, then brightness and contrast (uint8)."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    images = fn.hsv(
        images,
        hue=fn.random.uniform(range=list(HUE_DEGREES)),
        saturation=fn.random.uniform(range=list(SATURATION)),
        dtype=types.FLOAT,  # keep the intermediate unclipped and unquantized
    )
    return fn.brightness_contrast(
        images,
        brightness=fn.random.uniform(range=list(BRIGHTNESS)),
        contrast=fn.random.uniform(range=list(CONTRAST)),
        contrast_center=128.0,  # pixels are 0-255 here
        dtype=types.UINT8,
    )


def build_ssd_train_pipeline(
    images_dir: str | Path,
    annotation_file: str | Path,
    shard: DaliShard,
    *,
    size: int = 300,
    augment: bool = True,
    shuffle: bool = True,
    anchors_xyxy: Tensor | None = None,
    crop: DaliCrop = IOU_CROP,
    color_twist: bool = True,
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

    anchors = (default_boxes_xyxy() if anchors_xyxy is None else anchors_xyxy).flatten().tolist()
    on_gpu = shard.device_id is not None

    @pipeline_def(**pipeline_args(shard))  # type: ignore[untyped-decorator]  # DALI is untyped
    def pipeline() -> tuple[Any, ...]:
        jpegs, boxes, labels, image_ids = coco_reader(images_dir, annotation_file, shard, shuffle=shuffle)
        if augment:
            images, boxes, labels, flip = _decode_cropped(jpegs, boxes, labels, crop, on_gpu)
        else:
            decoder = "mixed" if on_gpu else "cpu"
            images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, adjust_orientation=False)
            flip = 0
        images = fn.resize(images, resize_x=size, resize_y=size)
        if augment and color_twist:
            images = _color_twist(images)
        images = normalize_chw(images, mirror=flip)
        boxes, labels = fn.box_encoder(boxes, labels, criteria=0.5, anchors=anchors)
        if on_gpu:
            boxes, labels = boxes.gpu(), labels.gpu()
        return images, boxes, labels, image_ids

    return pipeline()


class DaliSSDLoader(DaliLoader):
    """Batches of SSD training data from DALI, as torch tensors (:func:`build_ssd_train_pipeline`; its
    keyword options ``size``, ``augment``, ``shuffle``, ``anchors_xyxy``, ``crop``, ``color_twist`` pass
    through the constructor, e.g. SSD320's ``crop=TF_RANDOM_CROP, color_twist=False``).

    Yields ``(images, boxes, labels)``: ``images`` float32 ``[N, 3, size, size]`` normalized,
    ``boxes`` float32 ``[N, A, 4]`` centre form (cx, cy, w, h) normalized to 0-1, ``labels`` int64
    ``[N, A]`` (0 = background); A = 8732 with SSD300's default boxes. Tensors are on ``cuda:device_id``
    or on the CPU when ``device_id is None``. Epochs and shards: :class:`training.data.dali.DaliLoader`.
    """

    build = staticmethod(build_ssd_train_pipeline)

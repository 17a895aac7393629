"""SSD320 training input pipeline in NVIDIA DALI: TF's flip + random crop, then the SSD320 anchors.

COCO reader (as :mod:`training.data.dali_ssd`) -> crop window of TF's ``random_crop_image``
(``fn.random_crop_generator``: area 0.75-1 of the image, width / height 0.75-3 in pixels) placed uniformly
and applied to the boxes by ``fn.random_bbox_crop`` (boxes with any part inside kept and clipped, the
rest dropped: ``bbox_prune_threshold`` 0), the window decoded alone (``decoders.image_slice``) ->
horizontal flip p = 0.5 -> stretch resize to ``size x size`` -> ImageNet normalization ->
``box_encoder`` (IoU 0.5 plus forced matches) against the SSD320 anchors.

Differences from the DataLoader path (:mod:`training.detectors.ssd320.transforms`), none of which changes
what is learned: DALI draws the crop's aspect ratio log-uniformly (TF and the DataLoader path:
uniformly) and falls back to a central crop when no window fits; the flip comes after the crop here
(before it in TF), which gives the same distribution because the window is placed uniformly.

Outputs per batch, like :class:`training.data.dali_ssd.DaliSSDLoader` (which runs this pipeline):
``images`` float32 ``[N, 3, size, size]``, ``boxes`` float32 ``[N, A, 4]`` centre form, ``labels`` int64
``[N, A]`` (0 = unmatched).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.data.dali_ssd import coco_reader
from training.detectors.ssd300.transforms import IMAGENET_MEAN, IMAGENET_STD
from training.detectors.ssd320.anchors import AnchorConfig, generate_anchors_xyxy
from training.detectors.ssd320.transforms import CROP_AREA, CROP_ASPECT, CROP_ATTEMPTS

__all__ = ["build_ssd320_train_pipeline", "tf_random_crop"]


def tf_random_crop(jpegs: Any, boxes: Any, labels: Any) -> tuple[Any, Any, Any, Any]:
    """DALI graph nodes of TF's ``random_crop_image`` for encoded images and their ltrb ratio boxes:
    ``(crop_begin [x, y], crop_size [w, h])`` in pixels and the boxes (ratios of the crop) and labels
    that remain. Call inside a DALI pipeline definition."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    shape_hw = fn.cast(fn.peek_image_shape(jpegs)[0:2], dtype=types.INT32)
    _, crop_hw = fn.random_crop_generator(
        shape_hw,
        random_area=list(CROP_AREA),
        random_aspect_ratio=list(CROP_ASPECT),
        num_attempts=CROP_ATTEMPTS,
    )
    crop_begin, crop_size, boxes, labels = fn.random_bbox_crop(
        boxes,
        labels,
        device="cpu",
        crop_shape=fn.cast(crop_hw, dtype=types.INT32),
        input_shape=shape_hw,
        shape_layout="HW",
        bbox_layout="xyXY",
        thresholds=[0.0],
        threshold_type="overlap",
        bbox_prune_threshold=0.0,
        allow_no_crop=False,
        num_attempts=1,
    )
    return crop_begin, crop_size, boxes, labels


def build_ssd320_train_pipeline(
    images_dir: str | Path,
    annotation_file: str | Path,
    *,
    batch_size: int,
    num_threads: int,
    seed: int,
    shard_id: int = 0,
    num_shards: int = 1,
    device_id: int | None = None,
    size: int = 320,
    augment: bool = True,
    shuffle: bool = True,
    anchors_ltrb: Sequence[float] | None = None,
) -> Any:
    """The (not yet built) DALI pipeline; same signature and outputs as
    :func:`training.data.dali_ssd.build_ssd_train_pipeline` (``images``, ``boxes``, ``labels``,
    ``image_ids``). ``anchors_ltrb`` defaults to the SSD320 anchors for ``size``."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    pipeline_def: Any = importlib.import_module("nvidia.dali").pipeline_def

    if anchors_ltrb is None:
        anchors_ltrb = generate_anchors_xyxy(AnchorConfig(image_size=size)).flatten().tolist()
    anchors = list(anchors_ltrb)
    on_gpu = device_id is not None

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    def pipeline() -> tuple[Any, ...]:
        jpegs, boxes, labels, image_ids = coco_reader(
            images_dir, annotation_file, shard_id=shard_id, num_shards=num_shards, shuffle=shuffle
        )
        decoder = "mixed" if on_gpu else "cpu"
        if augment:
            crop_begin, crop_size, boxes, labels = tf_random_crop(jpegs, boxes, labels)
            images = fn.decoders.image_slice(
                jpegs,
                crop_begin,
                crop_size,
                normalized_anchor=False,  # random_bbox_crop gives pixels when crop_shape is fixed
                normalized_shape=False,
                device=decoder,
                output_type=types.RGB,
                adjust_orientation=False,
            )
            flip = fn.random.coin_flip(probability=0.5)
            boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        else:
            images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, adjust_orientation=False)
            flip = 0
        images = fn.resize(images, resize_x=size, resize_y=size)
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

"""SSD320 training input in NVIDIA DALI: TF's flip + random crop, then the SSD320 anchors.

:class:`training.detectors.ssd300.dali.DaliSSDLoader` with ``crop=TF_RANDOM_CROP, color_twist=False``: COCO
reader -> crop window of TF's ``random_crop_image`` (``fn.random_crop_generator``: area 0.75-1 of the
image, width / height 0.75-3 in pixels) placed uniformly and applied to the boxes by
``fn.random_bbox_crop`` (boxes with any part inside kept and clipped, the rest dropped:
``bbox_prune_threshold`` 0), the window decoded alone (``decoders.image_slice``) -> horizontal flip
p = 0.5 -> stretch resize to ``size x size`` -> ImageNet normalization -> ``box_encoder`` (IoU 0.5 plus
forced matches) against the SSD320 anchors.

Differences from the DataLoader path (:mod:`training.detectors.ssd320.transforms`), none of which changes
what is learned: DALI draws the crop's aspect ratio log-uniformly (TF and the DataLoader path:
uniformly) and falls back to a central crop when no window fits; the flip comes after the crop here
(before it in TF), which gives the same distribution because the window is placed uniformly.

Outputs per batch: ``images`` float32 ``[N, 3, size, size]``, ``boxes`` float32 ``[N, A, 4]`` centre
form, ``labels`` int64 ``[N, A]`` (0 = unmatched).
"""

from __future__ import annotations

import importlib
from typing import Any

from training.detectors.ssd300.dali import DaliCrop
from training.detectors.ssd320.transforms import CROP_AREA, CROP_ASPECT, CROP_ATTEMPTS

__all__ = ["TF_RANDOM_CROP", "tf_random_crop"]


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


# SSD320's augmentation in :class:`training.detectors.ssd300.dali.DaliSSDLoader`: this crop, no colour twist.
TF_RANDOM_CROP = DaliCrop(tf_random_crop, in_pixels=True)

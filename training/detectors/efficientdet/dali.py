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
from pathlib import Path
from typing import Any

from training.data.dali import DaliLoader, DaliShard, coco_reader, normalize_chw, pipeline_args
from training.detectors.efficientdet.transforms import (
    EFFICIENTDET_PAD_VALUE,
    MIN_TRAIN_BOX_SIDE,
    SCALE_JITTER,
    check_scale_range,
)

__all__ = ["DaliEfficientDetLoader", "build_efficientdet_train_pipeline"]


def _window(height: Any, width: Any, size: int, draws: tuple[Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
    """``training.detectors.efficientdet.transforms.random_scale_crop`` in DALI arithmetic: the image
    scaled by ``factor`` of the letterbox scale, the ``size x size`` window at ``(u_y, u_x)`` of the slack:
    ``(scaled_w, scaled_h, offset_x, offset_y)``."""
    dali_math: Any = importlib.import_module("nvidia.dali.math")
    factor, u_y, u_x = draws
    scale = dali_math.min(factor * size / height, factor * size / width)
    scaled_h = dali_math.max(dali_math.floor(height * scale + 0.5), 1.0)
    scaled_w = dali_math.max(dali_math.floor(width * scale + 0.5), 1.0)
    offset_y = dali_math.floor(dali_math.max(scaled_h - size, 0.0) * u_y)
    offset_x = dali_math.floor(dali_math.max(scaled_w - size, 0.0) * u_x)
    return scaled_w, scaled_h, offset_x, offset_y


def _image_size(jpegs: Any) -> tuple[Any, Any]:
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    shape = fn.peek_image_shape(jpegs)  # [H, W, C]
    return fn.cast(shape[0], dtype=types.FLOAT), fn.cast(shape[1], dtype=types.FLOAT)


def _cut(images: Any, window: tuple[Any, Any, Any, Any], size: int) -> Any:
    """Resize to the scaled size, cut the window, mean-pad where it leaves the image."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    scaled_w, scaled_h, offset_x, offset_y = window
    images = fn.resize(images, resize_x=scaled_w, resize_y=scaled_h)
    return fn.slice(
        images,
        start=fn.cast(fn.stack(offset_x, offset_y), dtype=types.INT32),
        shape=[size, size],
        axis_names="WH",
        out_of_bounds_policy="pad",
        fill_values=list(EFFICIENTDET_PAD_VALUE),
    )


def _boxes_in_window(
    boxes: Any, labels: Any, window: tuple[Any, Any, Any, Any], size: int
) -> tuple[Any, Any]:
    """Boxes relative to the original -> pixels of the window, clipped; labels -1 where too small; both
    padded to the batch's largest count."""
    fn: Any = importlib.import_module("nvidia.dali.fn")
    types: Any = importlib.import_module("nvidia.dali.types")
    dali_math: Any = importlib.import_module("nvidia.dali.math")
    scaled_w, scaled_h, offset_x, offset_y = window
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
    return fn.pad(boxes, axes=(0,), fill_value=0.0), fn.pad(labels, axes=(0,), fill_value=-1)


def build_efficientdet_train_pipeline(
    images_dir: str | Path,
    annotation_file: str | Path,
    shard: DaliShard,
    *,
    size: int,
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
    pipeline_def: Any = importlib.import_module("nvidia.dali").pipeline_def
    on_gpu = shard.device_id is not None

    @pipeline_def(**pipeline_args(shard))  # type: ignore[untyped-decorator]  # DALI is untyped
    def pipeline() -> tuple[Any, ...]:
        jpegs, boxes, labels, image_ids = coco_reader(images_dir, annotation_file, shard, shuffle=shuffle)
        height, width = _image_size(jpegs)  # peeked before decoding, as the window needs it
        images = fn.decoders.image(
            jpegs, device="mixed" if on_gpu else "cpu", output_type=types.RGB, adjust_orientation=False
        )
        draws: tuple[Any, Any, Any] = (1.0, 0.0, 0.0)
        if augment:
            flip = fn.random.coin_flip(probability=0.5)
            images = fn.flip(images, horizontal=flip)
            boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
            draws = (
                fn.random.uniform(range=list(scale_range)),
                fn.random.uniform(range=[0.0, 1.0]),
                fn.random.uniform(range=[0.0, 1.0]),
            )
        window = _window(height, width, size, draws)
        images = normalize_chw(_cut(images, window, size))
        boxes, labels = _boxes_in_window(boxes, labels, window, size)
        if on_gpu:
            boxes, labels = boxes.gpu(), labels.gpu()
        return images, boxes, labels, image_ids

    return pipeline()


class DaliEfficientDetLoader(DaliLoader):
    """Batches of EfficientDet training data from DALI, as torch tensors
    (:func:`build_efficientdet_train_pipeline`; its keyword options ``size``, ``scale_range``, ``augment``,
    ``shuffle`` pass through the constructor).

    Yields ``(images float32 [N, 3, S, S], boxes float32 [N, M, 4] xyxy network pixels, labels int64
    [N, M])`` (padding: zero boxes, label -1) on ``cuda:device_id`` or the CPU. Epochs and shards:
    :class:`training.data.dali.DaliLoader`.
    """

    build = staticmethod(build_efficientdet_train_pipeline)

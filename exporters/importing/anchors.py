"""SSD anchor sets: MediaPipe's ``SsdAnchorsCalculator`` (the anchors of its TFLite SSDs), or a file.

An anchor is (y_center, x_center, height, width), normalized to the network input; the order is the order of
the model's box and score rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from exporters.errors import ExportError


class MediaPipeSsdAnchors(BaseModel):
    """``mediapipe.SsdAnchorsCalculatorOptions`` (the fields a fixed-size SSD uses), same defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator: Literal["mediapipe_ssd"] = "mediapipe_ssd"
    num_layers: int = Field(gt=0)
    min_scale: float = Field(gt=0)
    max_scale: float = Field(gt=0)
    input_size_height: int = Field(gt=0)
    input_size_width: int = Field(gt=0)
    anchor_offset_x: float = 0.5
    anchor_offset_y: float = 0.5
    strides: tuple[int, ...]
    aspect_ratios: tuple[float, ...]
    reduce_boxes_in_lowest_layer: bool = False
    interpolated_scale_aspect_ratio: float = 1.0
    fixed_anchor_size: bool = False


class AnchorFile(BaseModel):
    """A ``.npy`` file of shape [A, 4]: y_center, x_center, height, width (normalized)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator: Literal["file"] = "file"
    path: Path


def _scale(min_scale: float, max_scale: float, index: int, count: int) -> float:
    if count == 1:
        return (min_scale + max_scale) * 0.5
    return min_scale + (max_scale - min_scale) * index / (count - 1.0)


def _layer_shapes(o: MediaPipeSsdAnchors, first: int, last: int) -> list[tuple[float, float]]:
    """(height, width) of each anchor per location, for the layers first..last that share one stride."""
    ratios: list[float] = []
    scales: list[float] = []
    for layer in range(first, last):
        scale = _scale(o.min_scale, o.max_scale, layer, len(o.strides))
        if layer == 0 and o.reduce_boxes_in_lowest_layer:
            ratios += [1.0, 2.0, 0.5]
            scales += [0.1, scale, scale]
            continue
        ratios += list(o.aspect_ratios)
        scales += [scale] * len(o.aspect_ratios)
        if o.interpolated_scale_aspect_ratio > 0.0:
            last_layer = layer == len(o.strides) - 1
            scale_next = 1.0 if last_layer else _scale(o.min_scale, o.max_scale, layer + 1, len(o.strides))
            scales.append(math.sqrt(scale * scale_next))
            ratios.append(o.interpolated_scale_aspect_ratio)
    return [(s / math.sqrt(r), s * math.sqrt(r)) for s, r in zip(scales, ratios, strict=True)]


def mediapipe_ssd_anchors(o: MediaPipeSsdAnchors) -> np.ndarray:
    """[A, 4] anchors in the order ``SsdAnchorsCalculator`` emits them (layers, rows, columns, shapes)."""
    if len(o.strides) != o.num_layers:
        raise ExportError(f"anchors: {o.num_layers} layers but {len(o.strides)} strides")
    rows: list[tuple[float, float, float, float]] = []
    layer = 0
    while layer < o.num_layers:
        last = layer
        while last < len(o.strides) and o.strides[last] == o.strides[layer]:
            last += 1
        shapes = _layer_shapes(o, layer, last)
        fh = math.ceil(o.input_size_height / o.strides[layer])
        fw = math.ceil(o.input_size_width / o.strides[layer])
        for y in range(fh):
            for x in range(fw):
                cy, cx = (y + o.anchor_offset_y) / fh, (x + o.anchor_offset_x) / fw
                rows += [(cy, cx, 1.0, 1.0) if o.fixed_anchor_size else (cy, cx, h, w) for h, w in shapes]
        layer = last
    return np.asarray(rows, dtype=np.float32)


def load_anchors(spec: MediaPipeSsdAnchors | AnchorFile, base: Path) -> np.ndarray:
    """The anchors a spec names; a file path is relative to ``base`` (the spec file's folder)."""
    if isinstance(spec, MediaPipeSsdAnchors):
        return mediapipe_ssd_anchors(spec)
    path = spec.path if spec.path.is_absolute() else base / spec.path
    try:
        anchors = np.load(path)
    except (OSError, ValueError) as exc:
        raise ExportError(f"anchors: cannot read {path}: {exc}") from exc
    if anchors.ndim != 2 or anchors.shape[1] != 4:
        raise ExportError(f"anchors: {path} has shape {list(anchors.shape)}; expected [A, 4]")
    return np.asarray(anchors, dtype=np.float32)

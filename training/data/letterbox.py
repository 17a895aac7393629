"""Letterbox resizing: the one geometry training, evaluation and the exporters' checks share.

An original ``h x w`` image is scaled by ``s = min(W / w, H / h)`` to ``round(w * s) x round(h * s)``
(at least 1, at most the network side), pasted at the top-left corner of an ``H x W`` canvas, and the
rest filled with ``pad_value``. Interpolation: area filtering when shrinking, bilinear when enlarging.

This is exactly ``service.imaging.letterbox_resize`` (the service may not import training, so it keeps
its own copy; ``tests/training/data/test_letterbox.py`` checks that both produce the same pixels and
map boxes back the same way). Boxes normalized to the network input map back to original pixels with
``x * W / (resized_w / w)``, clipped to the image, as the service's ``BoxTransform`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from numpy.typing import NDArray

__all__ = ["Letterbox", "letterbox_geometry", "letterbox_resize", "mean_pad_value"]


def mean_pad_value(mean: tuple[float, float, float]) -> tuple[int, int, int]:
    """The canvas fill as uint8: the normalization mean (0-1) times 255, rounded (normalizes to ~0)."""
    r, g, b = (round(255.0 * m) for m in mean)
    return r, g, b


@dataclass(frozen=True)
class Letterbox:
    """Where an original image sits in the letterboxed network input (pixels, top-left aligned)."""

    original_height: int
    original_width: int
    network_height: int
    network_width: int
    resized_height: int
    resized_width: int

    @property
    def scale_x(self) -> float:
        """Network pixels per original pixel along x (equals :attr:`scale_y` up to rounding)."""
        return self.resized_width / self.original_width

    @property
    def scale_y(self) -> float:
        return self.resized_height / self.original_height

    def boxes_to_original(self, boxes: NDArray[np.floating]) -> NDArray[np.float32]:
        """``[N, 4]`` x1, y1, x2, y2 normalized to the network input -> original-image pixels, clipped."""
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        out = np.empty_like(boxes)
        out[:, 0::2] = boxes[:, 0::2] * (self.network_width / self.scale_x)
        out[:, 1::2] = boxes[:, 1::2] * (self.network_height / self.scale_y)
        np.clip(out[:, 0::2], 0, self.original_width, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, self.original_height, out=out[:, 1::2])
        return out

    def boxes_to_network(self, boxes: NDArray[np.floating]) -> NDArray[np.float32]:
        """``[N, 4]`` original-image pixels -> pixels of the network input."""
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        scale = np.array([self.scale_x, self.scale_y, self.scale_x, self.scale_y], dtype=np.float32)
        return boxes * scale


def letterbox_geometry(height: int, width: int, network_height: int, network_width: int) -> Letterbox:
    """The letterbox of an ``height x width`` image in a ``network_height x network_width`` input."""
    if min(height, width, network_height, network_width) < 1:
        raise ValueError(f"sizes must be positive, got {height}x{width} -> {network_height}x{network_width}")
    scale = min(network_width / width, network_height / height)
    resized_w = min(network_width, max(1, round(width * scale)))
    resized_h = min(network_height, max(1, round(height * scale)))
    return Letterbox(height, width, network_height, network_width, resized_h, resized_w)


def letterbox_resize(
    image: NDArray[np.uint8], width: int, height: int, pad_value: tuple[int, int, int] = (0, 0, 0)
) -> tuple[NDArray[np.uint8], Letterbox]:
    """``image`` (uint8 ``[h, w, 3]``) letterboxed into ``height x width`` (see the module docstring)."""
    h, w = image.shape[:2]
    geometry = letterbox_geometry(h, w, height, width)
    new_w, new_h = geometry.resized_width, geometry.resized_height
    canvas = np.empty((height, width, 3), dtype=np.uint8)
    canvas[...] = np.asarray(pad_value, dtype=np.uint8)
    if (w, h) == (new_w, new_h):
        resized = image
    else:
        shrinking = w > new_w or h > new_h
        interp = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
        resized = np.asarray(cv2.resize(image, (new_w, new_h), interpolation=interp), dtype=np.uint8)
    canvas[:new_h, :new_w] = resized
    return canvas, geometry

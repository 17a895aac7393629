"""Image geometry shared by training, the exporters and the service: the one resize rule, letterbox, and
the way back from network-input boxes to original-image pixels.

Training's evaluation transforms, the exporters' verification and AP runs, and the service's request path
all resize through this module, so the pixels an artifact is measured on are the pixels it is served
(torch-free: the service imports it, and training and the exporters import it from here).

- The resize rule: area filtering when shrinking along either axis (antialiased, like DALI's resize),
  bilinear when enlarging; an image already at the target size is passed through untouched.
- ``stretch``: scale each axis independently to the network size.
- ``letterbox``: scale an ``h x w`` image by ``s = min(W / w, H / h)`` to ``round(w * s) x round(h * s)``
  (at least 1, at most the network side), paste it at the top-left corner of the ``H x W`` input, and
  fill the rest with a pad value.

Images are ``[H, W, C]`` arrays (RGB ``uint8`` on every served path). An image decoded at a reduced scale
(JPEG DCT scaling) passes its full ``original_size``: the geometry is then that of the original, and only
the pixels come from the smaller decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import cv2
import numpy as np
from numpy.typing import NDArray

from contract.manifest import InputSpec

__all__ = [
    "BoxTransform",
    "ResizeMode",
    "interpolation",
    "letterbox_geometry",
    "letterbox_resize",
    "network_content_size",
    "resize",
    "resize_for_network",
    "resize_to_input",
    "stretch_resize",
    "stretch_to_original",
]

ResizeMode = Literal["stretch", "letterbox"]


@dataclass(frozen=True)
class BoxTransform:
    """Where an original image sits in the network input, and the inverse for boxes.

    The image content (``resized_width x resized_height`` network pixels: the whole input for stretch)
    starts at the network input's top-left corner.
    """

    original_width: int
    original_height: int
    network_width: int
    network_height: int
    resized_width: int
    resized_height: int

    @property
    def scale_x(self) -> float:
        """Network pixels per original pixel along x (letterbox: equals :attr:`scale_y` up to rounding)."""
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


def stretch_to_original(boxes: NDArray[np.floating], size: tuple[int, int]) -> NDArray[np.float32]:
    """``[N, 4]`` boxes normalized to a stretched input -> pixels of an original ``(height, width)`` image,
    unclipped: training's evaluation mapping, which the exporters' eager-side AP follows (the service's
    :class:`BoxTransform` also clips to the image)."""
    height, width = size
    scale = np.array([width, height, width, height], dtype=np.float32)
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4) * scale


def interpolation(src_w: int, src_h: int, dst_w: int, dst_h: int) -> int:
    """The resize rule: area filtering when shrinking along either axis, bilinear when enlarging."""
    return cv2.INTER_AREA if (src_w > dst_w or src_h > dst_h) else cv2.INTER_LINEAR


def resize(image: NDArray[Any], width: int, height: int) -> NDArray[Any]:
    """``image [h, w, ...]`` resized to ``width x height`` with :func:`interpolation`'s rule (same dtype);
    returned as is when it already has that size."""
    h, w = image.shape[:2]
    if (w, h) == (width, height):
        return image
    resized = cv2.resize(image, (width, height), interpolation=interpolation(w, h, width, height))
    return np.asarray(resized, dtype=image.dtype)


def letterbox_geometry(height: int, width: int, network_height: int, network_width: int) -> BoxTransform:
    """The letterbox of an ``height x width`` image in a ``network_height x network_width`` input."""
    if min(height, width, network_height, network_width) < 1:
        raise ValueError(f"sizes must be positive, got {height}x{width} -> {network_height}x{network_width}")
    scale = min(network_width / width, network_height / height)
    resized_w = min(network_width, max(1, round(width * scale)))
    resized_h = min(network_height, max(1, round(height * scale)))
    return BoxTransform(width, height, network_width, network_height, resized_w, resized_h)


def stretch_resize(
    image: NDArray[np.uint8], width: int, height: int, original_size: tuple[int, int] | None = None
) -> tuple[NDArray[np.uint8], BoxTransform]:
    """Resize ``image`` to exactly ``width`` x ``height``, ignoring its aspect ratio.

    ``original_size`` (width, height): the full image's size when ``image`` is a reduced decode of it.
    """
    h, w = image.shape[:2]
    ow, oh = original_size or (w, h)
    resized = np.asarray(resize(image, width, height), dtype=np.uint8)
    return resized, BoxTransform(ow, oh, width, height, width, height)


def letterbox_resize(
    image: NDArray[np.uint8],
    width: int,
    height: int,
    pad_value: tuple[int, int, int] = (0, 0, 0),
    original_size: tuple[int, int] | None = None,
) -> tuple[NDArray[np.uint8], BoxTransform]:
    """Scale ``image`` to fit ``width`` x ``height`` keeping its aspect; paste it top-left; pad the rest.

    ``original_size`` (width, height): the full image's size when ``image`` is a reduced decode of it.
    """
    h, w = image.shape[:2]
    ow, oh = original_size or (w, h)
    geometry = letterbox_geometry(oh, ow, height, width)
    new_w, new_h = geometry.resized_width, geometry.resized_height
    canvas = np.empty((height, width, 3), dtype=np.uint8)
    canvas[...] = np.asarray(pad_value, dtype=np.uint8)
    canvas[:new_h, :new_w] = resize(image, new_w, new_h)
    return canvas, geometry


def resize_to_input(
    image: NDArray[np.uint8],
    mode: ResizeMode,
    width: int,
    height: int,
    pad_value: tuple[int, int, int] = (0, 0, 0),
    original_size: tuple[int, int] | None = None,
) -> tuple[NDArray[np.uint8], BoxTransform]:
    """The network input of ``image`` for a ``mode`` (a manifest's ``input.resize``), and its transform."""
    if mode == "letterbox":
        return letterbox_resize(image, width, height, pad_value, original_size)
    return stretch_resize(image, width, height, original_size)


def resize_for_network(
    image: NDArray[Any], spec: InputSpec, original_size: tuple[int, int] | None = None
) -> tuple[NDArray[Any], BoxTransform]:
    """Resize an RGB image the way the manifest's input spec says (the graph adapts colour/layout itself)."""
    return resize_to_input(image, spec.resize, spec.width, spec.height, spec.pad_value, original_size)


def network_content_size(spec: InputSpec, original_size: tuple[int, int]) -> tuple[int, int]:
    """(width, height) the image content occupies in the network input (letterbox: the pasted part)."""
    if spec.resize != "letterbox":
        return spec.width, spec.height
    width, height = original_size
    geometry = letterbox_geometry(height, width, spec.height, spec.width)
    return geometry.resized_width, geometry.resized_height

"""Resize decoded images to the network input, remembering how to map boxes back to original pixels.

Images are RGB ``uint8 [H, W, 3]`` throughout (`service.decoding` decodes them, EXIF orientation
applied), so "original image pixels" means the image as a viewer shows it. Resizing follows the
manifest's ``input.resize``:

- ``stretch``: scale each axis independently to the network size;
- ``letterbox``: scale by one factor so the image fits, paste it at the top-left corner, and fill the
  rest with ``input.pad_value``.

Both shrink with area filtering and enlarge bilinearly. `BoxTransform` undoes either one. An image
decoded at a reduced scale (JPEG DCT scaling) passes its full ``original_size``: the geometry is then
that of the original, and only the pixels come from the smaller decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from service.manifest import InputSpec


@dataclass(frozen=True)
class BoxTransform:
    """How an original image became the network input, and the inverse for boxes.

    ``scale_x`` / ``scale_y`` are network pixels per original pixel along each axis (equal for letterbox
    up to rounding of the pasted size); the image content starts at the network input's top-left corner.
    """

    original_width: int
    original_height: int
    network_width: int
    network_height: int
    scale_x: float
    scale_y: float

    def boxes_to_original(self, boxes: np.ndarray) -> np.ndarray:
        """[N, 4] x1, y1, x2, y2 normalized to the network input -> original-image pixels, clipped."""
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        out = np.empty_like(boxes)
        out[:, 0::2] = boxes[:, 0::2] * (self.network_width / self.scale_x)
        out[:, 1::2] = boxes[:, 1::2] * (self.network_height / self.scale_y)
        np.clip(out[:, 0::2], 0, self.original_width, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, self.original_height, out=out[:, 1::2])
        return out


def interpolation(src_w: int, src_h: int, dst_w: int, dst_h: int) -> int:
    """Area filtering when shrinking (antialiased, like DALI's resize), bilinear when enlarging.

    The same rule as training's evaluation resize and the exporters' verification, so an image served
    over HTTP reaches the graph with exactly the pixels the artifact was measured on.
    """
    return cv2.INTER_AREA if (src_w > dst_w or src_h > dst_h) else cv2.INTER_LINEAR


def stretch_resize(
    image: np.ndarray, width: int, height: int, original_size: tuple[int, int] | None = None
) -> tuple[np.ndarray, BoxTransform]:
    """Resize ``image`` to exactly ``width`` x ``height``, ignoring its aspect ratio.

    ``original_size`` (width, height): the full image's size when ``image`` is a reduced decode of it.
    """
    h, w = image.shape[:2]
    ow, oh = original_size or (w, h)
    resized = (
        image
        if (w, h) == (width, height)
        else cv2.resize(image, (width, height), interpolation=interpolation(w, h, width, height))
    )
    return resized, BoxTransform(ow, oh, width, height, width / ow, height / oh)


def letterbox_resize(
    image: np.ndarray,
    width: int,
    height: int,
    pad_value: tuple[int, int, int] = (0, 0, 0),
    original_size: tuple[int, int] | None = None,
) -> tuple[np.ndarray, BoxTransform]:
    """Scale ``image`` to fit ``width`` x ``height`` keeping its aspect; paste it top-left; pad the rest.

    ``original_size`` (width, height): the full image's size when ``image`` is a reduced decode of it.
    """
    h, w = image.shape[:2]
    ow, oh = original_size or (w, h)
    new_w, new_h = _fit(ow, oh, width, height)
    canvas = np.empty((height, width, 3), dtype=np.uint8)
    canvas[...] = np.asarray(pad_value, dtype=np.uint8)
    resized = (
        image
        if (w, h) == (new_w, new_h)
        else cv2.resize(image, (new_w, new_h), interpolation=interpolation(w, h, new_w, new_h))
    )
    canvas[:new_h, :new_w] = resized
    return canvas, BoxTransform(ow, oh, width, height, new_w / ow, new_h / oh)


def resize_for_network(
    image: np.ndarray, spec: InputSpec, original_size: tuple[int, int] | None = None
) -> tuple[np.ndarray, BoxTransform]:
    """Resize an RGB image the way the manifest's input spec says (the graph adapts colour/layout itself)."""
    if spec.resize == "letterbox":
        return letterbox_resize(image, spec.width, spec.height, spec.pad_value, original_size)
    return stretch_resize(image, spec.width, spec.height, original_size)


def network_content_size(spec: InputSpec, original_size: tuple[int, int]) -> tuple[int, int]:
    """(width, height) the image content occupies in the network input (letterbox: the pasted part)."""
    if spec.resize != "letterbox":
        return spec.width, spec.height
    return _fit(*original_size, spec.width, spec.height)


def _fit(w: int, h: int, width: int, height: int) -> tuple[int, int]:
    """The size of a w x h image scaled by one factor to fit width x height (letterbox)."""
    scale = min(width / w, height / h)
    return min(width, max(1, round(w * scale))), min(height, max(1, round(h * scale)))

"""Decode request images and resize them to the network input, remembering how to map boxes back.

Images are RGB ``uint8 [H, W, 3]`` throughout. Decoding applies the EXIF orientation (OpenCV's
``IMREAD_COLOR*`` flags do so by default), so "original image pixels" means the image as a viewer shows
it. Resizing follows the manifest's ``input.resize``:

- ``stretch``: scale each axis independently to the network size;
- ``letterbox``: scale by one factor so the image fits, paste it at the top-left corner, and fill the
  rest with ``input.pad_value``.

Both use bilinear interpolation. `BoxTransform` undoes either one.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from service.errors import BadRequest, PayloadTooLarge
from service.image_headers import ImageHeaderError, read_header
from service.manifest import InputSpec

# OpenCV >= 4.10 decodes straight to RGB; older versions decode BGR and need a conversion.
_IMREAD_RGB: int | None = getattr(cv2, "IMREAD_COLOR_RGB", None)


def decode_image(data: bytes, *, max_pixels: int, field: str = "image") -> np.ndarray:
    """Decode ``data`` to RGB uint8 [H, W, 3] with EXIF orientation applied.

    The size is read from the header and checked against ``max_pixels`` before any pixel is decoded.
    Raises `BadRequest` (empty, not an image, malformed or truncated) or `PayloadTooLarge` (too many
    pixels), naming ``field`` and what was wrong.
    """
    if not data:
        raise BadRequest(f"{field} is empty (0 bytes)", field=field)
    try:
        header = read_header(data)
    except ImageHeaderError as exc:
        raise BadRequest(f"{field}: {exc}", field=field) from exc
    if header.pixels > max_pixels:
        raise PayloadTooLarge(
            f"{field}: {header.width}x{header.height} {header.format.upper()} is {header.pixels} pixels; "
            f"the limit is {max_pixels}",
            field=field,
        )
    buffer = np.frombuffer(data, dtype=np.uint8)
    if _IMREAD_RGB is not None:
        image = cv2.imdecode(buffer, _IMREAD_RGB)
    else:
        image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
        if image is not None:
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if image is None:
        raise BadRequest(
            f"{field}: {header.format.upper()} data could not be decoded (corrupt or truncated)", field=field
        )
    return image


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


def stretch_resize(image: np.ndarray, width: int, height: int) -> tuple[np.ndarray, BoxTransform]:
    """Resize ``image`` to exactly ``width`` x ``height``, ignoring its aspect ratio."""
    h, w = image.shape[:2]
    resized = (
        image
        if (w, h) == (width, height)
        else cv2.resize(image, (width, height), interpolation=interpolation(w, h, width, height))
    )
    return resized, BoxTransform(w, h, width, height, width / w, height / h)


def letterbox_resize(
    image: np.ndarray, width: int, height: int, pad_value: tuple[int, int, int] = (0, 0, 0)
) -> tuple[np.ndarray, BoxTransform]:
    """Scale ``image`` to fit ``width`` x ``height`` keeping its aspect; paste it top-left; pad the rest."""
    h, w = image.shape[:2]
    scale = min(width / w, height / h)
    new_w = min(width, max(1, round(w * scale)))
    new_h = min(height, max(1, round(h * scale)))
    canvas = np.empty((height, width, 3), dtype=np.uint8)
    canvas[...] = np.asarray(pad_value, dtype=np.uint8)
    resized = (
        image
        if (w, h) == (new_w, new_h)
        else cv2.resize(image, (new_w, new_h), interpolation=interpolation(w, h, new_w, new_h))
    )
    canvas[:new_h, :new_w] = resized
    return canvas, BoxTransform(w, h, width, height, new_w / w, new_h / h)


def resize_for_network(image: np.ndarray, spec: InputSpec) -> tuple[np.ndarray, BoxTransform]:
    """Resize an RGB image the way the manifest's input spec says (the graph adapts colour/layout itself)."""
    if spec.resize == "letterbox":
        return letterbox_resize(image, spec.width, spec.height, spec.pad_value)
    return stretch_resize(image, spec.width, spec.height)

"""Decode request images to RGB ``uint8 [H, W, 3]``, knowing the cost before any pixel is decoded.

`plan_decode` reads the header (format, size, EXIF orientation), checks the pixel limit and decides
how the image will be decoded, so its memory can be budgeted first. `decode_planned` then decodes:

- JPEG with libjpeg-turbo through simplejpeg, strictly: data that ends before the declared pixels
  ("premature end") is an error, never a grey fill. When only the network input is needed and the
  image is at least twice the network size, it is decoded at 1/2, 1/4 or 1/8 scale by libjpeg's DCT
  scaling (still at least the network size, then area-resized as usual): a 12 Mpx photo costs a tenth
  of the memory and time. The EXIF orientation is applied as OpenCV applies it.
- PNG, BMP, WebP with OpenCV (which applies EXIF orientation itself; truncated data fails there).

"Original" sizes are always those of the full image as a viewer shows it (after orientation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import cv2
import numpy as np
import simplejpeg
from PIL import Image

from service.errors import BadRequest, PayloadTooLarge
from service.imaging.headers import ImageHeader, ImageHeaderError, read_header

# OpenCV >= 4.10 decodes straight to RGB; older versions decode BGR and need a conversion.
_IMREAD_RGB: int | None = getattr(cv2, "IMREAD_COLOR_RGB", None)
_IMREAD_REDUCED = {
    2: cv2.IMREAD_REDUCED_COLOR_2,
    4: cv2.IMREAD_REDUCED_COLOR_4,
    8: cv2.IMREAD_REDUCED_COLOR_8,
}
_EXIF_ORIENTATION = 0x0112
# libjpeg warnings that mean the data ended before the image did.
_TRUNCATION_WARNINGS = ("premature end",)


@dataclass(frozen=True)
class DecodePlan:
    """How one image will be decoded: its original size and the scale it is decoded at."""

    header: ImageHeader
    orientation: int  # EXIF orientation 1..8 (JPEG; OpenCV handles it for the other formats)
    scale_denominator: int  # 1 = full size; 2, 4, 8 = JPEG DCT scaling

    @property
    def transposed(self) -> bool:
        return self.orientation >= 5  # orientations 5-8 swap width and height

    @property
    def original_size(self) -> tuple[int, int]:
        """(width, height) as displayed (after orientation), at full scale."""
        w, h = self.header.width, self.header.height
        return (h, w) if self.transposed else (w, h)

    @property
    def decoded_pixels(self) -> int:
        d = self.scale_denominator
        return math.ceil(self.header.width / d) * math.ceil(self.header.height / d)


def plan_decode(
    data: bytes | bytearray,
    *,
    max_pixels: int,
    field: str = "image",
    reduce_to: Callable[[tuple[int, int]], tuple[int, int]] | None = None,
) -> DecodePlan:
    """Validate ``data``'s header and plan its decoding.

    ``reduce_to`` maps the original (width, height) to the smallest size the decode may shrink to (the
    image content's size in the network input): it allows a reduced JPEG decode when the image is at
    least twice that size. None decodes at full size (e.g. to draw on the original).
    Raises `BadRequest` (empty, not an image, malformed or truncated header) or `PayloadTooLarge`
    (more than ``max_pixels``), naming ``field``.
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
    orientation = _orientation(header.exif) if header.format == "jpeg" else 1
    plan = DecodePlan(header, orientation, 1)
    if header.format != "jpeg" or reduce_to is None:
        return plan
    target_w, target_h = reduce_to(plan.original_size)
    if plan.transposed:
        target_w, target_h = target_h, target_w  # the stored image is transposed
    for d in (8, 4, 2):
        if header.width // d >= target_w and header.height // d >= target_h:
            return DecodePlan(header, orientation, d)
    return plan


def decode_planned(data: bytes | bytearray, plan: DecodePlan, *, field: str = "image") -> np.ndarray:
    """Decode as planned: RGB uint8 [H, W, 3], oriented, at 1/``scale_denominator`` of the original."""
    if plan.header.format == "jpeg":
        image = _decode_jpeg(data, plan, field)
        if image is not None:
            return _orient(image, plan.orientation)
    buffer = np.frombuffer(data, dtype=np.uint8)
    reduced = _IMREAD_REDUCED.get(plan.scale_denominator)
    if reduced is not None:  # a JPEG libjpeg-turbo could not convert (e.g. CMYK): OpenCV scales it too
        decoded = cv2.imdecode(buffer, reduced)
        decoded = None if decoded is None else cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    elif _IMREAD_RGB is not None:
        decoded = cv2.imdecode(buffer, _IMREAD_RGB)
    else:
        decoded = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
        decoded = None if decoded is None else cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    if decoded is None:
        raise BadRequest(
            f"{field}: {plan.header.format.upper()} data could not be decoded (corrupt or truncated)",
            field=field,
        )
    return decoded


def decode_image(data: bytes | bytearray, *, max_pixels: int, field: str = "image") -> np.ndarray:
    """Decode ``data`` at full size to RGB uint8 [H, W, 3] with EXIF orientation applied."""
    return decode_planned(data, plan_decode(data, max_pixels=max_pixels, field=field), field=field)


def _decode_jpeg(data: bytes | bytearray, plan: DecodePlan, field: str) -> np.ndarray | None:
    """libjpeg-turbo decode; None for JPEGs it cannot convert to RGB (CMYK), which OpenCV then reads."""
    d = plan.scale_denominator
    size = {"min_width": math.ceil(plan.header.width / d), "min_height": math.ceil(plan.header.height / d)}
    try:
        return cast("np.ndarray | None", simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True, **size))
    except ValueError as exc:
        message = str(exc)
        if any(sign in message.lower() for sign in _TRUNCATION_WARNINGS):
            raise BadRequest(
                f"{field}: truncated JPEG: its data ends before the {plan.header.width}x"
                f"{plan.header.height} pixels its header declares ({message})",
                field=field,
            ) from exc
        if message.startswith("Corrupt JPEG data"):  # harmless warnings, e.g. extraneous bytes
            return cast(
                "np.ndarray | None", simplejpeg.decode_jpeg(data, colorspace="RGB", strict=False, **size)
            )
        return None


def _orientation(exif: bytes | None) -> int:
    if exif is None:
        return 1
    try:
        value = Image.Exif()
        value.load(exif)
        orientation = int(value.get(_EXIF_ORIENTATION, 1))
    except Exception:  # an unreadable EXIF block does not make the image unreadable
        return 1
    return orientation if 1 <= orientation <= 8 else 1


def _orient(image: np.ndarray, orientation: int) -> np.ndarray:
    """Apply EXIF ``orientation`` exactly as OpenCV's decoder does (flip codes 1: x, 0: y, -1: both)."""
    if orientation >= 5:
        image = cv2.transpose(image)
    flip = {2: 1, 3: -1, 4: 0, 6: 1, 7: -1, 8: 0}.get(orientation)
    return image if flip is None else cv2.flip(image, flip)

"""One frame of a stream source as the reader keeps it (`Frame`: decoded, or an intra-only codec's packet
bytes) and its conversion to RGB, scaled down to the session's pixel bound; a source whose frames are far
above that bound is refused (`SourceTooLarge`) before its decoder's buffers grow with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import av
import cv2
import numpy as np

from service.errors import PayloadTooLarge, ServiceError
from service.imaging.decoding import decode_planned, plan_decode
from service.imaging.headers import ImageHeaderError, read_header
from service.streams.motion import Glance

# A source whose frames have more pixels than this many times ``max_pixels`` is refused: its decoder's
# buffers (before any scaling) are at the source's resolution.
SOURCE_PIXELS_FACTOR = 4


@dataclass(frozen=True)
class Frame:
    """One frame of the source, as read: a decoded frame, or the bytes of an intra-only codec's packet."""

    source: av.VideoFrame | bytes
    codec: str  # the codec's name (decodes ``source`` when it is bytes)
    number: int  # frames read from the source by this reader, this one included
    pts: float | None  # seconds, the source's timestamp (None: the source has none)
    captured_at: float  # time.monotonic() when it was read
    captured_wall: float  # time.time() at the same moment
    glance: Glance | None = None  # its motion score and size, when the slot measures them

    @property
    def pixels(self) -> int:
        """The frame's pixels (0 when its bytes have no readable size): what converting it touches."""
        if isinstance(self.source, av.VideoFrame):
            return int(self.source.width * self.source.height)
        try:
            header = read_header(self.source)
        except ImageHeaderError:
            return 0
        return header.width * header.height

    def to_rgb(self, max_pixels: int) -> np.ndarray:
        """The frame as RGB ``uint8 [H, W, 3]``, scaled down to at most ``max_pixels`` (blocking: a worker
        thread). Raises `ValueError` for bytes that do not decode to a frame.

        An MJPEG frame is decoded by the service's JPEG decoder (libjpeg-turbo), ~4x faster here than
        FFmpeg's decoder plus its RGB conversion."""
        frame = self.source
        if isinstance(frame, bytes) and self.codec == "mjpeg":
            return _jpeg_to_rgb(frame, max_pixels)
        if isinstance(frame, bytes):
            decoder = av.VideoCodecContext.create(self.codec, "r")
            assert isinstance(decoder, av.VideoCodecContext)
            decoded = [*decoder.decode(av.Packet(frame)), *decoder.decode(None)]
            if not decoded:
                raise ValueError(f"a {self.codec} frame that does not decode")
            frame = decoded[0]
        assert isinstance(frame, av.VideoFrame)
        check_source_size(frame.width, frame.height, max_pixels)
        width, height = scaled_size(frame.width, frame.height, max_pixels)
        image: np.ndarray = frame.to_ndarray(width=width, height=height, format="rgb24")
        return image


class SourceTooLarge(ValueError):
    """The source's frames have more pixels than a session may decode."""


def _jpeg_to_rgb(data: bytes, max_pixels: int) -> np.ndarray:
    try:
        plan = plan_decode(data, max_pixels=SOURCE_PIXELS_FACTOR * max_pixels, field="frame")
    except PayloadTooLarge as exc:
        header = read_header(data)
        check_source_size(header.width, header.height, max_pixels)  # raises SourceTooLarge
        raise ValueError(exc.message) from exc
    except ServiceError as exc:
        raise ValueError(exc.message) from exc
    try:
        image = decode_planned(data, plan, field="frame")
    except ServiceError as exc:
        raise ValueError(exc.message) from exc
    height, width = image.shape[:2]
    size = scaled_size(width, height, max_pixels)
    if size == (width, height):
        return image
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def check_source_size(width: int, height: int, max_pixels: int) -> None:
    """`SourceTooLarge` for frames of more than `SOURCE_PIXELS_FACTOR` x ``max_pixels`` pixels."""
    if width * height > SOURCE_PIXELS_FACTOR * max_pixels:
        raise SourceTooLarge(
            f"the source's {width}x{height} frames are above {SOURCE_PIXELS_FACTOR} x stream_max_pixels "
            f"({SOURCE_PIXELS_FACTOR * max_pixels} pixels)"
        )


def scaled_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """``(width, height)``, scaled down keeping the aspect so that it has at most ``max_pixels``."""
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))

"""A cheap motion score per stream frame: the share of a small grey image that changed since the
session's previous frame.

The grey image comes from the cheapest decode there is: an MJPEG frame is decoded by libjpeg's DCT
scaling at 1/8 of its size (`PIL.Image.draft`: only each block's DC coefficient is used, no inverse DCT
of the full frame), a decoded frame (H.264, ...) is scaled by swscale straight to grey at 1/8; both are
then resized to a fixed `GRID` so a camera that changes resolution is still compared. A pixel has
changed when its grey level moved by more than ``level`` (default 12 of 255, above the sensor noise
the 1/8 scaling leaves); the score is the changed share, 0..1. It ranks sessions for the detector and
wakes idle ones (`service.streams.schedule`); it never chooses regions.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import av
import cv2
import numpy as np
from PIL import Image

GRID = (32, 24)  # width, height of the compared grey image


@dataclass(frozen=True)
class Glance:
    """What a session learns from a frame before deciding to detect it."""

    motion: float  # 0..1
    width: int  # the frame's size at the source (0: unknown)
    height: int


class MotionMeter:
    """One session's previous grey image and the score of each new frame (one caller at a time)."""

    def __init__(self, level: int = 12):
        self.level = level
        self._previous: np.ndarray | None = None

    def glance(self, source: av.VideoFrame | bytes, codec: str) -> Glance:
        """The motion score of ``source`` against the previous frame (0 for the first, and for a frame
        that does not decode: that one is not remembered)."""
        try:
            grey, width, height = _small_grey(source, codec)
        except (OSError, ValueError, SyntaxError, av.FFmpegError, Image.DecompressionBombError):
            return Glance(0.0, 0, 0)
        previous, self._previous = self._previous, grey
        if previous is None:
            return Glance(0.0, width, height)
        changed = np.abs(grey.astype(np.int16) - previous.astype(np.int16)) > self.level
        return Glance(float(changed.mean()), width, height)

    def reset(self) -> None:
        self._previous = None


def _small_grey(source: av.VideoFrame | bytes, codec: str) -> tuple[np.ndarray, int, int]:
    if isinstance(source, av.VideoFrame):
        width, height = source.width, source.height
        small = source.to_ndarray(width=max(1, width // 8), height=max(1, height // 8), format="gray")
    elif codec == "mjpeg":
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(source))
            width, height = image.size
            image.draft("L", (max(1, width // 8), max(1, height // 8)))
            small = np.asarray(image.convert("L"))
    else:
        raise ValueError(f"no cheap grey image for {codec!r} packets")
    grey: np.ndarray = cv2.resize(small, GRID, interpolation=cv2.INTER_AREA)
    return grey, width, height

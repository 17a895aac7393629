"""Tiny videos the tests make themselves with PyAV (a square moving across a dark background)."""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np

CODECS = {"mp4": "libx264", "matroska": "libx264", "webm": "libvpx-vp9", "mov": "libx264"}


def frame_image(width: int, height: int, index: int, background: int = 30) -> np.ndarray:
    """Frame ``index``: a yellow square moving right by 4 pixels a frame, on a grey background."""
    image = np.full((height, width, 3), background, dtype=np.uint8)
    side = max(4, min(width, height) // 3)
    x = (4 * index) % max(1, width - side)
    y = (height - side) // 2
    image[y : y + side, x : x + side] = (230, 200, 40)
    return image


def make_video(
    width: int = 64,
    height: int = 48,
    frames: int = 10,
    fps: int = 10,
    container: str = "mp4",
    codec: str | None = None,
    background: int = 30,
) -> bytes:
    """An encoded video of ``frames`` frames at ``fps`` (`frame_image`), in memory."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as output:
        stream = output.add_stream(codec or CODECS[container], rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(frames):
            image = frame_image(width, height, index, background)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    return buffer.getvalue()

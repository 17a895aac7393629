"""Tiny videos the tests make themselves with PyAV (a square moving across a dark background)."""

from __future__ import annotations

import io
import struct
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


def noisy_mjpeg_mkv(frames: int = 40, seed: int = 0) -> bytes:
    """Motion-JPEG frames of random pixels in Matroska: each frame is its own JPEG, so damage in the middle
    of the file is an error FFmpeg reports at that frame (H.264 and VP9 conceal it instead)."""
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="matroska") as output:
        stream = output.add_stream("mjpeg", rate=Fraction(10))
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuvj420p"
        for _ in range(frames):
            image = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
            output.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        output.mux(stream.encode())
    return buffer.getvalue()


def claim_duration(matroska: bytes, seconds: float) -> bytes:
    """A Matroska file whose header claims ``seconds`` of video (its Segment Info Duration, in the default
    millisecond timescale), whatever its frames are."""
    data = bytearray(matroska)
    at = data.find(b"\x44\x89\x88")  # Duration element, an 8-byte float
    assert at >= 0, "no 8-byte Duration element"
    data[at + 3 : at + 11] = struct.pack(">d", seconds * 1000.0)
    return bytes(data)

"""Boxed frames -> an MP4 (H.264) written as it is made: fragmented, so each fragment can be sent at once
and the whole file is never held in memory.

::

    with Mp4Writer(width, height, fps) as mp4:
        mp4.add(image_bgr)  # uint8 [H, W, 3]
        chunk = mp4.take()  # the bytes written so far (send them)
    tail = mp4.take()  # the rest, after the block flushed the encoder

The encoder (libx264, preset veryfast, no look-ahead and no B-frames: it holds a few frames, not dozens)
runs in the caller's thread: callers run `add` in a worker thread. Frames of odd width or height lose
their last column or row (4:2:0 needs even sides).
"""

from __future__ import annotations

from fractions import Fraction
from types import TracebackType

import av
import numpy as np

# The encoder's working set per pixel of frame size: its reference and look-ahead frames (YUV 4:2:0) and
# the conversion from BGR.
ENCODER_BYTES_PER_PIXEL = 8 * 1.5 + 3


class _Sink:
    """A write-only file for the muxer: keeps what was written until `take`."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


class Mp4Writer:
    """An H.264 MP4 of ``width`` x ``height`` frames at ``fps`` (see the module's docstring)."""

    def __init__(self, width: int, height: int, fps: float):
        self.width, self.height = width - width % 2, height - height % 2
        if self.width < 2 or self.height < 2:
            raise ValueError(f"a frame of {width}x{height} is too small to encode")
        self._sink = _Sink()
        self._container: av.container.OutputContainer | None = av.open(
            self._sink,
            "w",
            format="mp4",
            options={"movflags": "frag_keyframe+empty_moov+default_base_moof"},
        )
        rate = Fraction(fps).limit_denominator(1001)
        stream = self._container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = self.width, self.height, "yuv420p"
        stream.options = {"preset": "veryfast", "tune": "zerolatency", "crf": "23"}
        stream.codec_context.time_base = 1 / rate
        # A key frame (and so a fragment the caller can send) every second of video.
        stream.codec_context.gop_size = max(1, round(fps))
        stream.codec_context.thread_count = 1  # frame threads would each hold frames: memory stays bounded
        self._stream = stream
        self._frames = 0

    def add(self, image_bgr: np.ndarray) -> None:
        """Encode the next frame (``uint8 [H, W, 3]`` BGR, the writer's size or one more pixel)."""
        frame = av.VideoFrame.from_ndarray(
            np.ascontiguousarray(image_bgr[: self.height, : self.width]), format="bgr24"
        )
        frame.pts = self._frames
        self._frames += 1
        if self._container is None:
            raise ValueError("the MP4 writer is closed")
        self._container.mux(self._stream.encode(frame))

    def take(self) -> bytes:
        """The file's bytes written since the last call."""
        return self._sink.take()

    def close(self) -> None:
        """Flush the encoder and finish the file (idempotent)."""
        if self._container is None:
            return
        container, self._container = self._container, None
        try:
            container.mux(self._stream.encode())
        finally:
            container.close()

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

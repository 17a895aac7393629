"""Video files (MP4, MKV, WebM, MOV: H.264, H.265, VP8/9, AV1, MPEG-4, MJPEG) -> RGB frames, with PyAV.

::

    with open_video(data, limits) as video:  # raises BadRequest / PayloadTooLarge on a bad file
        video.info.width, video.info.height  # from the stream header, checked against max_pixels
        for frame in video.frames(fps=5, max_frames=100):  # skips frames to keep at most 5 per second
            frame.image  # RGB uint8 [H, W, 3]; frame.pts in seconds; frame.index counts decoded frames

Nothing in a file's header is trusted beyond what it costs to check: the frame size is refused before any
frame is decoded when it is over ``max_pixels`` (FFmpeg's own ``max_pixels`` guard also stops the decoder
from allocating a larger frame, even while probing the file or when the size changes mid-stream); the
number of frames and the duration a header claims are reported, never used to allocate anything, and
reading stops at ``max_read_frames`` decoded frames or at ``max_duration_s`` of video time, whichever
comes first (`VideoReader.stopped_by` says which). The decoder runs on one thread, so its memory is its
reference frames (at most 16, YUV 4:2:0: 1.5 bytes per pixel) plus the frame being converted:
`DECODER_BYTES_PER_PIXEL` bounds it. Decoding is blocking: callers run `frames` in a worker thread.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

import av
import av.error
import numpy as np

from service.errors import BadRequest, PayloadTooLarge

# The decoder's working set per pixel of frame size: up to 16 reference frames and 2 more in YUV 4:2:0
# (1.5 bytes per pixel each), and the RGB conversion (3).
DECODER_BYTES_PER_PIXEL = 18 * 1.5 + 3

# What FFmpeg is told when it opens a video file (bytes in memory): it opens no URL of any kind. Only the
# served containers' demuxers are probed (an HLS playlist or a concat script uploaded as the body is never
# read as one, whatever FFmpeg's probing would guess), the mov demuxer does not follow external data
# references, and no protocol is allowed for anything opened from inside the file ("none" names none).
_NO_URLS = {
    "format_whitelist": "mov,matroska",
    "enable_drefs": "0",
    "protocol_whitelist": "none",
}

# Container signatures: ISO base media (MP4, MOV, 3GP: 'ftyp' at byte 4) and EBML (Matroska, WebM).
_EBML = b"\x1a\x45\xdf\xa3"
# FFmpeg's demuxer names (comma-separated in ``format.name``) of the containers served.
_CONTAINERS = {"mov", "mp4", "matroska", "webm"}
VIDEO_MEDIA_TYPES = ("video/mp4", "video/quicktime", "video/x-matroska", "video/webm")


def looks_like_video(data: bytes | bytearray) -> bool:
    """Whether ``data`` starts like an MP4 / MOV or Matroska / WebM file (what `open_video` is for)."""
    head = bytes(data[:12])
    return head[4:8] == b"ftyp" or head.startswith(_EBML)


@dataclass(frozen=True)
class VideoLimits:
    """What one video may cost (`service.settings.Settings`: ``video_*``)."""

    max_pixels: int  # width * height of a frame
    max_read_frames: int  # decoded frames, processed or skipped
    max_duration_s: float  # video time read


@dataclass(frozen=True)
class VideoInfo:
    """What the file's header says (only the frame size is relied on, once checked)."""

    width: int
    height: int
    codec: str
    container: str
    fps: float | None  # average frame rate, when the header gives one
    claimed_frames: int | None
    claimed_duration_s: float | None

    @property
    def pixels(self) -> int:
        return self.width * self.height


@dataclass(frozen=True)
class Frame:
    """One decoded frame: ``index`` counts every decoded frame (0, 1, ...), ``pts`` is in seconds."""

    index: int
    pts: float
    image: np.ndarray  # RGB uint8 [H, W, 3]


class VideoReader:
    """An open video's first video stream (see `open_video`)."""

    def __init__(self, container: av.container.InputContainer, info: VideoInfo, limits: VideoLimits):
        self._container = container
        self._stream = container.streams.video[0]
        self.info = info
        self.limits = limits
        self.read = 0  # frames decoded
        self.stopped_by: str | None = None  # the limit that ended reading early, if any
        # Held by whoever steps `frames` or closes the file: a close from another thread waits for the
        # decoder to finish its frame.
        self.lock = threading.Lock()

    @classmethod
    def open(cls, data: bytes | bytearray | io.IOBase, limits: VideoLimits) -> VideoReader:
        """The video in ``data`` (bytes or a binary file object); the caller closes it (`close`).

        Raises `BadRequest` (field ``video``) when it is not an MP4 / MOV / MKV / WebM file FFmpeg can
        read or has no video stream, `PayloadTooLarge` when its frames are over ``limits.max_pixels``.
        """
        source = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
        try:
            # max_pixels reaches the decoder while the file is probed too: a huge frame is never allocated.
            options = {"max_pixels": str(limits.max_pixels), **_NO_URLS}
            container = av.open(source, "r", options=options)
        except av.error.FFmpegError as err:
            raise BadRequest(
                f"video: not a readable video file ({err}); send MP4, MOV, MKV or WebM", field="video"
            ) from err
        try:
            return cls(container, _info(container, limits), limits)
        except BaseException:
            container.close()
            raise

    def close(self) -> None:
        """Close the file (once the frame being decoded, if any, is done)."""
        with self.lock:
            self._container.close()

    def frames(self, fps: float | None = None, max_frames: int | None = None) -> Iterator[Frame]:
        """The frames to process, in order: at most ``fps`` per second of video time (by pts; None: all)
        and at most ``max_frames`` in all. Raises `BadRequest` when the data is corrupt; a file cut short
        ends after its last whole frame."""
        interval = 1.0 / fps if fps else 0.0
        next_pts = float("-inf")
        given = 0
        limits = self.limits
        for frame in self._decoded():
            pts = self._seconds(frame)
            if pts > limits.max_duration_s:
                self.stopped_by = "max_duration_s"
                return
            if self.read >= limits.max_read_frames:
                self.stopped_by = "max_read_frames"
                return
            self.read += 1
            if pts + 1e-6 < next_pts:
                continue
            if frame.width * frame.height > limits.max_pixels:
                raise PayloadTooLarge(
                    f"video frame {self.read - 1} is {frame.width}x{frame.height}; the limit is "
                    f"{limits.max_pixels} pixels (video_max_pixels)",
                    field="video",
                )
            image = frame.to_ndarray(format="rgb24")
            yield Frame(self.read - 1, pts, image)
            given += 1
            # The next frame to keep is the first at or after the next tick of a 1/fps grid.
            next_pts = (pts if next_pts == float("-inf") else next_pts) + interval
            if next_pts <= pts:
                next_pts = pts + interval
            if max_frames is not None and given >= max_frames:
                self.stopped_by = "max_frames"
                return

    def _decoded(self) -> Iterator[av.VideoFrame]:
        try:
            for packet in self._container.demux(self._stream):
                yield from packet.decode()
        except av.error.FFmpegError as err:
            if self.read == 0:
                raise BadRequest(f"video: cannot decode its frames ({err})", field="video") from err
            raise BadRequest(
                f"video: corrupt data after frame {self.read - 1} ({err})", field="video"
            ) from err

    def _seconds(self, frame: av.VideoFrame) -> float:
        if frame.pts is None or frame.time_base is None:
            rate = self.info.fps or 30.0
            return self.read / rate
        return float(frame.pts * frame.time_base) - self._start

    @property
    def _start(self) -> float:
        start = self._stream.start_time
        base = self._stream.time_base
        return float(start * base) if start is not None and base is not None else 0.0


@contextmanager
def open_video(data: bytes | bytearray | io.IOBase, limits: VideoLimits) -> Iterator[VideoReader]:
    """`VideoReader.open` for the block: the file is closed when it ends."""
    reader = VideoReader.open(data, limits)
    try:
        yield reader
    finally:
        reader.close()


def _info(container: av.container.InputContainer, limits: VideoLimits) -> VideoInfo:
    names = set(container.format.name.split(","))
    if not names & _CONTAINERS:
        raise BadRequest(
            f"video: {container.format.long_name or container.format.name} files are not served; send MP4, "
            "MOV, MKV or WebM",
            field="video",
        )
    if not container.streams.video:
        raise BadRequest("video: the file has no video stream", field="video")
    stream = container.streams.video[0]
    stream.thread_count = 1  # one decoder thread: its memory is DECODER_BYTES_PER_PIXEL per pixel
    # The container's options reached only the probing decoder: the decoding one needs its own guard (a
    # frame whose size changes mid-stream past the limit is then an error, never an allocation).
    stream.codec_context.options = {"max_pixels": str(limits.max_pixels)}
    width, height = stream.codec_context.width, stream.codec_context.height
    if width <= 0 or height <= 0:
        raise BadRequest(f"video: no frame size in its header ({width}x{height})", field="video")
    if width * height > limits.max_pixels:
        raise PayloadTooLarge(
            f"video frames are {width}x{height} = {width * height} pixels; the limit is {limits.max_pixels} "
            "(video_max_pixels)",
            field="video",
        )
    rate = stream.average_rate
    duration = None
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        duration = container.duration / av.time_base
    return VideoInfo(
        width=width,
        height=height,
        codec=stream.codec_context.name,
        container=container.format.name,
        fps=float(rate) if isinstance(rate, Fraction) and rate > 0 else None,
        claimed_frames=stream.frames or None,
        claimed_duration_s=duration,
    )

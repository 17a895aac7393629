"""Reading a stream source in its own thread, keeping only the newest frame.

`FrameReader` opens the URL with PyAV (FFmpeg: rtsp, http(s) MJPEG, HLS, MP4, ...) with an open timeout
and a read timeout, so a source that never answers, stalls, dribbles or sends garbage fails within a known
time instead of holding the thread. It keeps at most ``fps`` frames a second and puts each into a
`NewestFrame` slot that holds one frame: a frame not taken before the next arrives is dropped and counted
(stale frames are never queued, so lag cannot grow).

Work is spent only on frames that are processed: a frame is converted to RGB (`Frame.to_rgb`, scaled down
to at most ``max_pixels``) by whoever takes it, not by the reader; and a source whose every frame stands
alone (MJPEG) is not even decoded by the reader: the slot holds the frame's compressed bytes, decoded
when taken. A source with inter-frame coding (H.264, ...) must be decoded frame by frame; its decoded
frame waits in the slot.

A source that ends (a file served over HTTP) or fails is reopened after a backoff (doubling from
``reconnect_initial_s`` up to ``reconnect_max_s``); after ``reconnect_attempts`` failures in a row without a
frame the reader gives up (state ``error``). A finite source (one with a duration: a file) is played at
its own speed (by its timestamps), a live one as fast as it arrives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import av

from service.streams.fetch import Opener
from service.streams.frame import Frame, check_source_size
from service.streams.guard import SourceGuard, SourceRefused
from service.streams.motion import Glance
from service.streams.rtsp_relay import RtspRelay
from service.streams.sources import redact, redact_in
from service.streams.state import SessionState

logger = logging.getLogger(__name__)

# The longest a finite source's pacing waits for one frame (a timestamp jump must not stall the reader).
_MAX_PACING_WAIT_S = 1.0


# Codecs whose every frame decodes alone: the reader keeps their packets, not decoded frames.
INTRA_ONLY_CODECS = frozenset({"mjpeg"})


@dataclass(frozen=True)
class ReaderConfig:
    """How a reader opens, converts, paces and reconnects (from the settings and the session)."""

    url: str
    fps: float
    max_pixels: int
    open_timeout_s: float
    read_timeout_s: float
    reconnect_initial_s: float
    reconnect_max_s: float
    reconnect_attempts: int  # 0: never give up
    protocol_whitelist: str  # what FFmpeg may open, also from inside the source (HLS segments)
    rtsp_probe_s: float  # how much of an RTSP source FFmpeg reads to learn its streams when opening it
    # Checks every URL opened for the session (None: only the posted URL was checked, by the caller).
    guard: SourceGuard | None = None


class RateMeter:
    """Events per second over the last ``window_s`` seconds (0 when fewer than two came in it)."""

    def __init__(self, window_s: float = 2.0) -> None:
        self.window_s = window_s
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def tick(self, now: float) -> None:
        with self._lock:
            self._times.append(now)
            self._forget(now)

    def rate(self, now: float) -> float:
        with self._lock:
            self._forget(now)
            times = self._times
            if len(times) < 2 or times[-1] <= times[0]:
                return 0.0
            return (len(times) - 1) / (times[-1] - times[0])

    def _forget(self, now: float) -> None:
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()


class NewestFrame:
    """A slot of one frame, written by the reader thread and read by the session's task.

    ``on_put`` is called (in the reader thread) after each put; the session uses it to wake its task.
    ``glance``, if given, measures each frame's motion score (`service.streams.motion`) in the reader
    thread before it is put, from a 1/8-scale grey image, never a full decode.
    """

    def __init__(
        self, on_put: Callable[[], None], glance: Callable[[av.VideoFrame | bytes, str], Glance] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._frame: Frame | None = None
        self._on_put = on_put
        self._glance = glance
        self.dropped = 0  # frames replaced before anyone took them

    def put(self, frame: Frame) -> None:
        if self._glance is not None:
            frame = dataclasses.replace(frame, glance=self._glance(frame.source, frame.codec))
        with self._lock:
            if self._frame is not None:
                self.dropped += 1
            self._frame = frame
        self._on_put()

    def take(self) -> Frame | None:
        """The newest frame not taken yet (None: none since the last take)."""
        with self._lock:
            frame, self._frame = self._frame, None
            return frame


def _open_options(config: ReaderConfig) -> dict[str, str]:
    options = {"protocol_whitelist": config.protocol_whitelist}
    if config.url.startswith(("rtsp://", "rtsps://")):
        # RTSP over TCP: no lost UDP packets (smeared frames) on a busy network; and under a guard, RTP
        # comes interleaved on the one connection the relay carries (with UDP FFmpeg would send its RTCP
        # wherever the camera's SETUP answer says).
        options["rtsp_transport"] = "tcp"
        # FFmpeg's default probe reads a live source until it has ~20 frames (to measure the frame rate,
        # which the reader does not use) or 5 s of it: 1.4 s of a 15 fps camera, 5 s of a 2 fps one,
        # spent again at every reconnect. The SDP and the first frames tell the codec and size sooner.
        options["analyzeduration"] = str(round(config.rtsp_probe_s * 1_000_000))
    elif config.guard is not None:
        # http(s) goes through the checked opener (`_opener`): the HLS demuxer must open each segment
        # anew through it, not reuse FFmpeg's own http connection to the previous one (with the default
        # http_persistent=1 FFmpeg asserts that the previous segment's connection is its own, and aborts).
        options["http_persistent"] = "0"
        options["http_multiple"] = "0"
    return options


def _opener(config: ReaderConfig) -> Opener | RtspRelay | None:
    """How a source under a guard is opened: an http(s) source through PyAV's ``io_open``
    (`service.streams.fetch`), an RTSP one through a relay to the checked address
    (`service.streams.rtsp_relay`, whose ``url`` FFmpeg opens instead); None without a guard."""
    guard = config.guard
    if guard is None:
        return None
    if config.url.startswith(("rtsp://", "rtsps://")):
        return RtspRelay(guard.check(config.url), config.open_timeout_s)
    return Opener(guard, config.open_timeout_s, config.read_timeout_s)


class FrameReader:
    """One source's reader thread: see the module docstring. `start` once, `stop` once."""

    def __init__(self, config: ReaderConfig, slot: NewestFrame, state: SessionState) -> None:
        self.config = config
        self.slot = slot
        self.state = state
        self.frames_read = 0  # decoded from the source
        self.frames_skipped = 0  # decoded but over the session's fps
        self.reconnects = 0
        self.input_rate = RateMeter()  # frames read per second
        self.size: tuple[int, int] | None = None  # the source's frame size (decoded frames; else its taker's)
        self._opened_as = config.url  # the URL FFmpeg was last given (a relay's, for RTSP under a guard)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Ask the thread to stop and wait up to ``timeout`` seconds; False if it still runs (it is
        blocked in a read, which gives up within the read timeout, and then exits)."""
        self._stop.set()
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        url = self.config.url
        backoff = self.config.reconnect_initial_s
        failures = 0
        while not self._stop.is_set():
            got_frames = False
            try:
                got_frames = self._read_once()
                reason = "the source ended"
            except SourceRefused as exc:  # an address outside what is allowed: retrying would not help
                self.state.fail(redact_in(str(exc), url))
                return
            except (av.ExitError, TimeoutError):  # the open or read timeout passed
                reason = (
                    f"timed out: no answer within {self.config.open_timeout_s:g}s (open) or no data within "
                    f"{self.config.read_timeout_s:g}s (read)"
                )
            except (av.FFmpegError, OSError, ValueError) as exc:  # av raises OSError subclasses too
                reason = f"{type(exc).__name__}: {exc}"
            except Exception as exc:
                trace = "".join(traceback.format_exception(exc))
                logger.error("stream reader for %s failed: %s", redact(url), redact_in(trace, url))
                reason = f"{type(exc).__name__}: {exc}"
            if self._stop.is_set():
                return
            # FFmpeg's errors name the URL it opened (the relay's, for RTSP under a guard), password included.
            reason = redact_in(reason.replace(self._opened_as, url), url)
            if got_frames:
                failures, backoff = 0, self.config.reconnect_initial_s
            failures += 1
            attempts = self.config.reconnect_attempts
            if attempts and failures >= attempts:
                self.state.fail(f"{reason} ({failures} attempts in a row without a frame)")
                return
            self.state.reconnecting(reason)
            self.reconnects += 1
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, self.config.reconnect_max_s)

    def _read_once(self) -> bool:
        """Open the source and read it until it ends or stop is asked; True if it gave a frame."""
        cfg = self.config
        timeouts = (cfg.open_timeout_s, cfg.read_timeout_s)
        got = False
        opener = _opener(cfg)
        relay = opener if isinstance(opener, RtspRelay) else None
        io_open = opener if isinstance(opener, Opener) else None
        self._opened_as = url = cfg.url if relay is None else relay.url
        with (
            opener or contextlib.nullcontext(),
            av.open(url, timeout=timeouts, options=_open_options(cfg), io_open=io_open) as container,
        ):
            if not container.streams.video:
                raise ValueError("the source has no video stream")
            stream = container.streams.video[0]
            codec = stream.codec_context.name
            check_source_size(stream.codec_context.width, stream.codec_context.height, cfg.max_pixels)
            if codec in INTRA_ONLY_CODECS:
                return self._read_packets(container, stream, codec)
            finite = container.duration is not None
            period = 1.0 / cfg.fps
            next_due = time.monotonic()
            started, first_pts = time.monotonic(), None
            for frame in container.decode(stream):
                if self._stop.is_set():
                    return got
                now = time.monotonic()
                if not got:
                    got = True
                    self.state.running()
                self._count_input(now)
                if finite and frame.time is not None:
                    first_pts = frame.time if first_pts is None else first_pts
                    wait = started + (frame.time - first_pts) - now
                    if wait > 0 and self._stop.wait(min(wait, _MAX_PACING_WAIT_S)):
                        return got
                    now = time.monotonic()
                if now < next_due - 0.25 * period:  # over the session's fps
                    self.frames_skipped += 1
                    continue
                next_due = max(next_due + period, now - period)
                self.size = (frame.width, frame.height)
                self.slot.put(
                    Frame(frame, codec, self.frames_read, frame.time, time.monotonic(), time.time())
                )
        return got

    def _read_packets(
        self, container: av.container.InputContainer, stream: av.VideoStream, codec: str
    ) -> bool:
        """An intra-only source (MJPEG): its packets, kept undecoded; True if it gave one."""
        period = 1.0 / self.config.fps
        next_due = time.monotonic()
        got = False
        for packet in container.demux(stream):
            if self._stop.is_set():
                return got
            if packet.size == 0:  # the demuxer's end-of-stream marker
                continue
            now = time.monotonic()
            if not got:
                got = True
                self.state.running()
            self._count_input(now)
            if now < next_due - 0.25 * period:
                self.frames_skipped += 1
                continue
            next_due = max(next_due + period, now - period)
            pts = (
                None
                if packet.pts is None or packet.time_base is None
                else float(packet.pts * packet.time_base)
            )
            self.slot.put(Frame(bytes(packet), codec, self.frames_read, pts, now, time.time()))
        return got

    def _count_input(self, now: float) -> None:
        self.frames_read += 1
        self.input_rate.tick(now)

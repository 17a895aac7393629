"""One camera or stream session: a reader thread, a task that detects its newest frame, tracks, events.

The reader (`service.streams.reader`) keeps only the newest frame. The session's task takes it, sends it
through the one pipeline entry at stream priority with the lag bound as its deadline (a frame that
cannot start inference in time is dropped and counted, so lag stays bounded whatever the load), gives
its detections to the session's tracker, publishes one event per processed frame to the Server-Sent
Events clients, and keeps that frame and its detections for the snapshot. One frame at a time per
session: a session never has more than one frame in the batcher.

Memory: a session holds the reader's newest frame (a JPEG, or one decoded frame of a source of at most
4 x ``stream_max_pixels`` pixels), the RGB frame being detected and the last processed one for the
snapshot (each at most ``stream_max_pixels`` pixels), plus the decoder's own buffers (docs/streams.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import av
import numpy as np

from service.errors import DeadlineExceeded, QueueFull, ServiceError
from service.imaging.postprocess import DetectParams, KeptDetections, parse_class_filter
from service.imaging.render import render_detections
from service.pipeline.entry import DetectionPipeline
from service.runtime.model_runtime import ModelRuntime
from service.streams.events import EventHub
from service.streams.metrics import StreamMetrics
from service.streams.reader import (
    Frame,
    FrameReader,
    NewestFrame,
    RateMeter,
    ReaderConfig,
    SourceTooLarge,
)
from service.streams.schemas import StreamInfo, StreamRequest
from service.streams.sources import redact
from service.streams.state import SessionState, State

logger = logging.getLogger(__name__)

# Lag percentiles are reported over this many latest frames.
_LAG_WINDOW = 256


class FrameTracker(Protocol):
    """Track ids for one session's successive frames (`service.video.tracking.Tracker`)."""

    def update(self, boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """``boxes`` float [N, 4], ``scores`` float [N] -> track ids int [N] (-1: no id yet)."""
        ...


class TrackerFactory(Protocol):
    def __call__(self, fps: float) -> FrameTracker: ...


@dataclass(frozen=True)
class SessionLimits:
    """What bounds every session (from the settings)."""

    max_lag_s: float
    max_subscribers: int
    event_buffer: int


@dataclass
class _Processed:
    frame: Frame
    image: np.ndarray  # RGB uint8 [H, W, 3]
    detections: KeptDetections
    track_ids: np.ndarray


class StreamSession:
    """See the module docstring. Created and owned by `service.streams.manager.StreamManager`."""

    def __init__(
        self,
        session_id: str,
        request: StreamRequest,
        model_name: str,
        reader_config: ReaderConfig,
        *,
        pipeline: DetectionPipeline,
        runtime: ModelRuntime,
        metrics: StreamMetrics,
        tracker: FrameTracker,
        limits: SessionLimits,
        declared: bool = False,
    ) -> None:
        self.id = session_id
        self.request = request
        self.model_name = model_name
        self.declared = declared
        self._pipeline = pipeline
        self._runtime = runtime
        self._metrics = metrics
        self._tracker = tracker
        self._limits = limits
        self.state = SessionState(on_change=metrics.state_changed)
        metrics.state_changed(None, "starting")
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._slot = NewestFrame(self._frame_arrived)
        self._reader = FrameReader(reader_config, self._slot, self.state)
        self.events = EventHub(
            limits.max_subscribers, limits.event_buffer, metrics.events_missed.labels(session_id).inc
        )
        self._task: asyncio.Task[None] | None = None
        self._latest: _Processed | None = None
        self._lags: deque[float] = deque(maxlen=_LAG_WINDOW)
        self.frames_processed = 0
        self.dropped = {"shed": 0, "expired": 0, "unavailable": 0, "corrupt": 0}
        self._max_pixels = reader_config.max_pixels
        self._reported = {"read": 0, "stale": 0, "reconnects": 0}
        self._processed_rate = RateMeter()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._reader.start()
        self._task = self._loop.create_task(self._run(), name=f"stream-{self.id}")
        self._task.add_done_callback(self._on_task_done)

    async def stop(self, timeout_s: float) -> None:
        """Stop the task and the reader thread (which gives up its read within the read timeout)."""
        self.state.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        stopped = await asyncio.to_thread(self._reader.stop, timeout_s)
        if not stopped:
            logger.warning(
                "stream %s: reader still in a read after %.1fs; it exits when that times out",
                self.id,
                timeout_s,
            )
        self.events.close()

    def _frame_arrived(self) -> None:
        """In the reader thread: wake the task (the loop may be closed at shutdown)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake.set)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("stream %s: its task failed", self.id, exc_info=exc)
            self.state.fail(f"internal error: {type(exc).__name__}: {exc}")
            self._reader.stop(0)

    # ------------------------------------------------------------------ work

    async def _run(self) -> None:
        while True:
            try:  # also wakes every second to report the reader's counts while no frame comes
                async with asyncio.timeout(1.0):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            frame = self._slot.take()
            if frame is not None:
                await self._process(frame)
            self._sync_counters()

    async def _process(self, frame: Frame) -> None:
        try:  # decoded (intra-only sources) and converted only now that it is processed
            scheduler = self._pipeline.resources.scheduler
            image = await scheduler.run(frame.pixels, frame.to_rgb, self._max_pixels, may_inline=False)
        except SourceTooLarge as exc:  # an MJPEG camera's frames: known only once one is decoded
            self.state.fail(str(exc))
            await asyncio.to_thread(self._reader.stop, 0)
            return
        except (av.FFmpegError, ValueError) as exc:
            self._drop("corrupt")
            logger.debug("stream %s: frame %d does not decode: %s", self.id, frame.number, exc)
            return
        try:
            detections = await self._detect(frame, image)
        except (QueueFull, DeadlineExceeded) as exc:
            late = time.monotonic() > frame.captured_at + self._limits.max_lag_s
            self._drop("expired" if late or isinstance(exc, DeadlineExceeded) else "shed")
            return
        except ServiceError as exc:  # model not serving (loading, swapped out, draining): a dropped frame
            self._drop("unavailable")
            logger.debug("stream %s: frame dropped: %s", self.id, exc.message)
            return
        track_ids = np.asarray(self._tracker.update(detections.boxes, detections.scores), dtype=np.int64)
        self._latest = _Processed(frame, image, detections, track_ids)
        lag = time.monotonic() - frame.captured_at
        self._lags.append(lag)
        self._metrics.lag.labels(self.id).observe(lag)
        self.frames_processed += 1
        self._metrics.processed_frames.labels(self.id).inc()
        self._metrics.active_tracks.labels(self.id).set(int(np.count_nonzero(track_ids >= 0)))
        self._processed_rate.tick(time.monotonic())
        self.events.publish(self._event(frame, image, detections, track_ids, lag))

    async def _detect(self, frame: Frame, image: np.ndarray) -> KeptDetections:
        model = self._runtime.get(self.model_name, None)
        model.require_ready()
        labels = model.manifest.labels
        params = DetectParams(
            score_threshold=self.request.score_threshold,
            class_ids=parse_class_filter(self.request.classes, labels),
        )
        with model.lease():
            async with self._pipeline.admit(
                model, frame.captured_at, timeout_s=self._limits.max_lag_s, priority="stream"
            ) as run:
                return (await run.detect_frames([image], params, labels=[f"stream {self.id}"]))[0].detections

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1
        self._metrics.dropped_frames.labels(self.id, reason).inc()

    def _sync_counters(self) -> None:
        """Carry the reader thread's counts into the metrics."""
        reader, reported, stream = self._reader, self._reported, self.id
        for key, value, counter in (
            ("read", reader.frames_read, self._metrics.input_frames.labels(stream)),
            ("stale", self._slot.dropped, self._metrics.dropped_frames.labels(stream, "stale")),
            ("reconnects", reader.reconnects, self._metrics.reconnects.labels(stream)),
        ):
            if value > reported[key]:
                counter.inc(value - reported[key])
                reported[key] = value
        self._metrics.input_fps.labels(stream).set(self.input_fps)
        self._metrics.processed_fps.labels(stream).set(self.processed_fps)

    @property
    def input_fps(self) -> float:
        """Frames read from the source per second, over the last 2 s."""
        return self._reader.input_rate.rate(time.monotonic())

    @property
    def processed_fps(self) -> float:
        """Frames processed per second, over the last 2 s."""
        return self._processed_rate.rate(time.monotonic())

    def _event(
        self,
        frame: Frame,
        image: np.ndarray,
        detections: KeptDetections,
        track_ids: np.ndarray,
        lag: float,
    ) -> dict[str, object]:
        labels = self._runtime.get(self.model_name, None).manifest.labels
        height, width = image.shape[:2]
        return {
            "stream": self.id,
            "frame": frame.number,
            "pts": frame.pts,
            "captured_at": round(frame.captured_wall, 3),
            "lag_ms": round(lag * 1000, 1),
            "width": width,
            "height": height,
            "detections": [
                {
                    "track_id": int(track_ids[i]) if track_ids[i] >= 0 else None,
                    "class_id": int(detections.classes[i]),
                    "label": labels[int(detections.classes[i])].name,
                    "score": round(float(detections.scores[i]), 4),
                    "box": [round(float(v), 1) for v in detections.boxes[i]],
                }
                for i in range(len(detections))
            ],
        }

    # --------------------------------------------------------------- reports

    def snapshot_jpeg(self) -> bytes | None:
        """The last processed frame with its boxes and track ids drawn (worker thread); None before one."""
        latest = self._latest
        if latest is None:
            return None
        labels = self._runtime.get(self.model_name, None).manifest.labels
        ids = [int(i) for i in latest.track_ids]
        return render_detections(latest.image, latest.detections, labels, "jpeg", track_ids=ids)

    @property
    def current_state(self) -> State:
        return self.state.value

    def info(self) -> StreamInfo:
        lags = sorted(self._lags)
        size = None if self._latest is None else self._latest.image.shape[1::-1]
        reader = self._reader
        stale = self._slot.dropped
        latest = self._latest
        return StreamInfo(
            id=self.id,
            url=redact(self.request.url),
            model=self.model_name,
            state=self.state.value,
            state_since=self.state.since,
            last_error=self.state.last_error,
            fps=self._reader.config.fps,
            input_fps=round(self.input_fps, 2),
            processed_fps=round(self.processed_fps, 2),
            frames_read=reader.frames_read,
            frames_processed=self.frames_processed,
            frames_skipped=reader.frames_skipped,
            dropped_frames=stale + sum(self.dropped.values()),
            lag_ms_p50=_percentile_ms(lags, 0.5),
            lag_ms_p99=_percentile_ms(lags, 0.99),
            reconnects=reader.reconnects,
            active_tracks=0 if latest is None else int(np.count_nonzero(latest.track_ids >= 0)),
            width=None if size is None else size[0],
            height=None if size is None else size[1],
            subscribers=self.events.subscribers,
            declared=self.declared,
        )


def _percentile_ms(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return round(sorted_values[index] * 1000, 1)

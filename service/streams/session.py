"""One camera or stream session: a reader thread, a task that answers every frame, tracks, events.

The reader (`service.streams.reader`) keeps only the newest frame, with its motion score
(`service.streams.motion`). The session's task takes each frame and asks the detection scheduler
(`service.streams.scheduler`) whether it goes to the detector. A detected frame is converted, sent
through the one pipeline entry at stream priority with a deadline to start (`start_deadline_s`: a few
batch times, at most the lag bound; a frame late to start is dropped, counted and predicted), and
its detections go to the session's tracker. Every other frame is answered by the tracker: its live
tracks advanced to the frame's time (`service.video.prediction`), marked ``predicted``. Frames that
arrive while the session's detection runs wait (metadata only, at most `MAX_WAITING`) and are answered
after it, in order. So every frame taken gets one event, published to the Server-Sent Events clients;
the last detected frame and its detections are kept for the snapshot. One frame at a time per session
is in the batcher.

The tracker's clock is the frames' capture time (monotonic, in frames at the session's fps), never the
source's timestamps, so a camera whose timestamps jump or stall cannot move it backwards. A frame whose
size differs from the previous one (a camera that changed resolution) ends every track and is detected.

Memory: a session holds the reader's newest frame (a JPEG, or one decoded frame of a source of at most
4 x ``stream_max_pixels`` pixels), the RGB frame being detected and the last detected one for the
snapshot (each at most ``stream_max_pixels`` pixels), the decoder's own buffers, and at most
`MAX_WAITING` waiting frames' metadata (docs/streams.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import av
import numpy as np

from service.errors import DeadlineExceeded, QueueFull, ServiceError
from service.imaging.postprocess import DetectParams, KeptDetections, parse_class_filter
from service.imaging.render import render_detections
from service.pipeline.entry import DetectionPipeline
from service.runtime.model_runtime import ModelRuntime
from service.streams.answers import AnswerStats, frame_event
from service.streams.events import EventHub
from service.streams.frame import Frame, SourceTooLarge, scaled_size
from service.streams.metrics import StreamMetrics
from service.streams.motion import MotionMeter
from service.streams.predictor import FramePredictor
from service.streams.reader import FrameReader, NewestFrame, ReaderConfig
from service.streams.schedule import Candidate, start_deadline_s
from service.streams.scheduler import DetectionScheduler
from service.streams.schemas import StreamInfo, StreamRequest
from service.streams.sources import redact
from service.streams.state import SessionState, State

logger = logging.getLogger(__name__)

# Frames answered after the running detection, at most (older ones are dropped as stale): it lasts at
# most its start deadline (at most the lag bound) plus a batch: ~1 s at worst, 30 frames at 30 fps.
MAX_WAITING = 64


@dataclass(frozen=True)
class SessionLimits:
    """What bounds every session (from the settings)."""

    max_lag_s: float
    max_subscribers: int
    event_buffer: int
    wait_batches: float = 0.0  # stream_detect_wait_batches (`start_deadline_s`)


@dataclass
class _Detected:
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
        predictor: FramePredictor,
        scheduler: DetectionScheduler,
        limits: SessionLimits,
        batch_s: Callable[[], float | None] = lambda: None,  # the model's measured full-batch time
        declared: bool = False,
    ) -> None:
        self.id = session_id
        self.request = request
        self.model_name = model_name
        self.declared = declared
        self._pipeline = pipeline
        self._runtime = runtime
        self._metrics = metrics
        self._predictor = predictor
        self._scheduler = scheduler
        self._limits = limits
        self._batch_s = batch_s
        self.state = SessionState(on_change=metrics.state_changed)
        metrics.state_changed(None, "starting")
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._slot = NewestFrame(self._frame_arrived, MotionMeter().glance)
        self._reader = FrameReader(reader_config, self._slot, self.state)
        self.events = EventHub(
            limits.max_subscribers, limits.event_buffer, metrics.events_missed.labels(session_id).inc
        )
        self._task: asyncio.Task[None] | None = None
        self._detecting: asyncio.Task[None] | None = None
        self._waiting: deque[tuple[Frame, float]] = deque()
        self._latest: _Detected | None = None
        self._last_detected_at: float | None = None  # capture time of the last detected frame
        self._size: tuple[int, int] | None = None  # the source's frame size, as last seen
        self._fps = reader_config.fps
        self._started = time.monotonic()
        self.stats = AnswerStats()
        self.dropped = {"stale": 0, "shed": 0, "expired": 0, "unavailable": 0, "corrupt": 0}
        self._max_pixels = reader_config.max_pixels
        self._reported = {"read": 0, "stale": 0, "reconnects": 0}

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._reader.start()
        self._task = self._loop.create_task(self._run(), name=f"stream-{self.id}")
        self._task.add_done_callback(self._on_task_done)

    async def stop(self, timeout_s: float) -> None:
        """Stop the task and the reader thread (which gives up its read within the read timeout)."""
        self.state.stop()
        for task in (self._task, self._detecting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
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
                await self._take(frame)
            self._sync_counters()

    async def _take(self, frame: Frame) -> None:
        """Answer ``frame``: detect it, or predict it now, or after the detection that is running."""
        glance = frame.glance
        if glance is not None and glance.width:
            self.stats.motion = glance.motion
            size = (glance.width, glance.height)
            if self._size is not None and size != self._size:  # the camera changed resolution
                self._predictor.reset()
                self._last_detected_at = None
            self._size = size
        position = (frame.captured_at - self._started) * self._fps
        if self._detecting is not None:
            if len(self._waiting) >= MAX_WAITING:
                self._waiting.popleft()
                self._drop("stale")
            self._waiting.append((frame, position))
            return
        if await self._scheduler.decide(self.model_name, self._candidate(frame, position)):
            self._detecting = self._loop.create_task(self._detect_then_answer(frame, position))
            self._detecting.add_done_callback(self._on_task_done)
        else:
            self._answer_predicted(frame, position)

    def _candidate(self, frame: Frame, position: float) -> Candidate:
        predictor, last = self._predictor, self._last_detected_at
        return Candidate(
            self.id,
            None if last is None else predictor.frames_since_detection,
            math.inf if last is None else max(0.0, time.monotonic() - last),
            predictor.live_tracks,
            predictor.new_tracks,
            0.0 if frame.glance is None else frame.glance.motion,
            predictor.drift(position),
        )

    async def _detect_then_answer(self, frame: Frame, position: float) -> None:
        try:
            if not await self._detected(frame, position):
                self._answer_predicted(frame, position)  # its detection was dropped: still an answer
        finally:
            waiting, self._waiting = self._waiting, deque()
            for later, at in waiting:
                self._answer_predicted(later, at)
            self._detecting = None
            self._wake.set()  # a frame that came meanwhile may be waiting in the slot

    async def _detected(self, frame: Frame, position: float) -> bool:
        """Convert, detect and track ``frame``, and publish its event; False when it was dropped."""
        try:  # decoded (intra-only sources) and converted only now that it is detected
            scheduler = self._pipeline.resources.scheduler
            image = await scheduler.run(frame.pixels, frame.to_rgb, self._max_pixels, may_inline=False)
        except SourceTooLarge as exc:  # an MJPEG camera's frames: known only once one is decoded
            self.state.fail(str(exc))
            await asyncio.to_thread(self._reader.stop, 0)
            return True  # nothing more is answered
        except (av.FFmpegError, ValueError) as exc:
            self._drop("corrupt")
            logger.debug("stream %s: frame %d does not decode: %s", self.id, frame.number, exc)
            return False
        wait_s = start_deadline_s(
            self._limits.max_lag_s, self._limits.wait_batches, self._batch_s(), self._fps
        )
        try:
            detections = await self._detect(frame, image, wait_s)
        except (QueueFull, DeadlineExceeded) as exc:
            late = time.monotonic() > frame.captured_at + wait_s
            self._drop("expired" if late or isinstance(exc, DeadlineExceeded) else "shed")
            return False
        except ServiceError as exc:  # model not serving (loading, swapped out, draining): a dropped frame
            self._drop("unavailable")
            logger.debug("stream %s: frame dropped: %s", self.id, exc.message)
            return False
        track_ids = self._predictor.detected(position, detections)
        self._latest = _Detected(frame, image, detections, track_ids)
        self._last_detected_at = frame.captured_at
        size = (image.shape[1], image.shape[0])
        self._publish(frame, size, detections, track_ids, 0)
        self._metrics.active_tracks.labels(self.id).set(int(np.count_nonzero(track_ids >= 0)))
        glance = frame.glance
        if glance is not None and glance.width and (glance.width, glance.height) != self._size:
            self._predictor.reset()  # the camera changed resolution while this frame was detected
            self._last_detected_at = None
        return True

    def _answer_predicted(self, frame: Frame, position: float) -> None:
        if self._size is not None:
            size = scaled_size(*self._size, self._max_pixels)
        elif self._latest is not None:
            size = (self._latest.image.shape[1], self._latest.image.shape[0])
        else:
            size = (0, 0)
        carried = self._predictor.predicted(position, size if size[0] and size[1] else None)
        since = max(1, carried.frames_since_detection)
        self._publish(frame, size, carried.as_detections(), carried.track_ids, since)

    def _publish(
        self, frame: Frame, size: tuple[int, int], found: KeptDetections, ids: np.ndarray, since: int
    ) -> None:
        now = time.monotonic()
        lag = now - frame.captured_at
        self.stats.count(now, lag, since)
        metrics, stream = self._metrics, self.id
        metrics.lag.labels(stream).observe(lag)
        metrics.processed_frames.labels(stream).inc()
        (metrics.predicted_frames if since else metrics.detected_frames).labels(stream).inc()
        if not self.events.subscribers:
            return
        labels = self._runtime.get(self.model_name, None).manifest.labels
        self.events.publish(frame_event(stream, frame, size, found, ids, labels, lag, since))

    async def _detect(self, frame: Frame, image: np.ndarray, wait_s: float) -> KeptDetections:
        model = self._runtime.get(self.model_name, None)
        model.require_ready()
        labels = model.manifest.labels
        params = DetectParams(
            score_threshold=self.request.score_threshold,
            class_ids=parse_class_filter(self.request.classes, labels),
        )
        with model.lease():
            async with self._pipeline.admit(
                model, frame.captured_at, timeout_s=wait_s, priority="stream"
            ) as run:
                return (await run.detect_frames([image], params, labels=[f"stream {self.id}"]))[0].detections

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1
        self._metrics.dropped_frames.labels(self.id, reason).inc()

    def _sync_counters(self) -> None:
        """Carry the reader thread's counts into the metrics."""
        reader, reported, stream, metrics = self._reader, self._reported, self.id, self._metrics
        for key, value, counter in (
            ("read", reader.frames_read, metrics.input_frames.labels(stream)),
            ("stale", self._slot.dropped, metrics.dropped_frames.labels(stream, "stale")),
            ("reconnects", reader.reconnects, metrics.reconnects.labels(stream)),
        ):
            if value > reported[key]:
                counter.inc(value - reported[key])
                reported[key] = value
        now = time.monotonic()
        self.stats.dropped_rate.observe(now, self.dropped_frames)
        metrics.input_fps.labels(stream).set(self.input_fps)
        metrics.processed_fps.labels(stream).set(self.stats.answered_fps(now))
        metrics.detected_fps.labels(stream).set(self.stats.detected_rate.rate(now))
        metrics.predicted_fps.labels(stream).set(self.stats.predicted_rate.rate(now))
        metrics.dropped_fps.labels(stream).set(self.stats.dropped_rate.rate())
        metrics.frames_since_detection.labels(stream).set(self.stats.since_max)
        metrics.motion.labels(stream).set(self.stats.motion)

    @property
    def input_fps(self) -> float:
        """Frames read from the source per second, over the last 2 s."""
        return self._reader.input_rate.rate(time.monotonic())

    @property
    def dropped_frames(self) -> int:
        return self._slot.dropped + sum(self.dropped.values())

    # --------------------------------------------------------------- reports

    def snapshot_jpeg(self) -> bytes | None:
        """The last detected frame with its boxes and track ids drawn (worker thread); None before one."""
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
        stats, reader, now = self.stats, self._reader, time.monotonic()
        lags = sorted(stats.lags)
        latest = self._latest
        size = None if latest is None else latest.image.shape[1::-1]
        return StreamInfo(
            id=self.id,
            url=redact(self.request.url),
            model=self.model_name,
            state=self.state.value,
            state_since=self.state.since,
            last_error=self.state.last_error,
            fps=reader.config.fps,
            input_fps=round(self.input_fps, 2),
            processed_fps=round(stats.answered_fps(now), 2),
            detected_fps=round(stats.detected_rate.rate(now), 2),
            predicted_fps=round(stats.predicted_rate.rate(now), 2),
            dropped_fps=round(stats.dropped_rate.rate(), 2),
            frames_read=reader.frames_read,
            frames_processed=stats.answered,
            frames_detected=stats.detected,
            frames_predicted=stats.predicted,
            frames_skipped=reader.frames_skipped,
            dropped_frames=self.dropped_frames,
            frames_since_detection_max=stats.since_max,
            motion=round(stats.motion, 4),
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

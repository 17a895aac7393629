"""The owner of every stream session: opens them within the limits, lists, stops and removes them.

Started and stopped in the app lifespan (`service.app`): `start` opens the streams declared in the
settings file (``streams_file``), `stop` stops every session's task and reader thread. A URL is opened
only when its scheme is rtsp, rtsps, http or https and it starts with one of the prefixes of
``stream_sources``; with none configured stream sessions are off and every endpoint answers 403. Every
further URL a session opens (redirects, HLS parts) is checked by the same rules (`SourceGuard`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import uuid
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from service.errors import BadRequest, NotFound, QueueFull, ServiceError
from service.imaging.postprocess import parse_class_filter
from service.pipeline.entry import DetectionPipeline
from service.runtime.model_runtime import ModelRuntime
from service.settings import Settings
from service.streams.guard import SourceGuard, parse_address_classes
from service.streams.metrics import StreamMetrics
from service.streams.predictor import PredictorFactory
from service.streams.reader import ReaderConfig
from service.streams.schedule import SchedulePolicy
from service.streams.scheduler import BudgetConfig, DetectionScheduler
from service.streams.schemas import DeclaredStream, StreamRequest
from service.streams.session import SessionLimits, StreamSession
from service.streams.sources import PROTOCOL_WHITELIST, StreamsOff, check_source, redact

logger = logging.getLogger(__name__)


def load_declared(path: Path) -> list[DeclaredStream]:
    """The streams of the settings file (a JSON list); `ValueError` naming what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return TypeAdapter(list[DeclaredStream]).validate_python(data)
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise ValueError(f"streams_file {str(path)!r}: {exc}") from exc


class StreamManager:
    """See the module docstring."""

    def __init__(
        self,
        settings: Settings,
        runtime: ModelRuntime,
        metrics: StreamMetrics,
        predictor_factory: PredictorFactory,
    ) -> None:
        self.settings = settings
        self.prefixes = settings.stream_source_prefixes
        # Checks every URL a session opens, redirects and HLS parts included (service.streams.guard).
        self.guard = SourceGuard(
            self.prefixes,
            parse_address_classes(settings.stream_address_classes),
            settings.stream_redirects,
        )
        self._runtime = runtime
        self._metrics = metrics
        self._predictor_factory = predictor_factory
        self._sessions: dict[str, StreamSession] = {}
        policy = SchedulePolicy(
            settings.stream_detect_every_max_frames,
            settings.stream_idle_detect_s,
            settings.stream_motion_threshold,
        )
        budget = BudgetConfig(
            settings.stream_detect_share,
            settings.stream_detect_budget_fps,
            settings.stream_schedule_interval_ms / 1000,
        )
        self.scheduler = DetectionScheduler(
            policy, budget, self._throughput, spare=self._spare, report=self._report_budget
        )
        self._pipeline: DetectionPipeline | None = None
        self._stopping = False
        # Read when the app is created, so a broken file stops the server before it serves.
        path = settings.streams_file
        self._declared = load_declared(path) if path is not None else []
        for stream in self._declared:
            check_source(stream.url, self.prefixes)

    @property
    def enabled(self) -> bool:
        return bool(self.prefixes)

    def start(self, pipeline: DetectionPipeline) -> None:
        """Take the pipeline (created in the lifespan) and open the declared streams."""
        self._pipeline = pipeline
        for stream in self._declared:
            try:
                self.create(stream, session_id=stream.id, declared=True)
            except Exception as exc:
                logger.error("declared stream %r not started: %s", stream.id, exc)

    async def stop(self, timeout_s: float) -> None:
        self._stopping = True
        sessions, self._sessions = list(self._sessions.values()), {}
        # Together: each reader may take up to its read timeout to notice.
        await asyncio.gather(*(session.stop(timeout_s) for session in sessions))
        for session in sessions:
            self._forget(session)

    def require_enabled(self) -> None:
        if not self.enabled:
            raise StreamsOff()

    def create(
        self, request: StreamRequest, *, session_id: str | None = None, declared: bool = False
    ) -> StreamSession:
        """Open a session (its state starts at ``starting``); raises the 4xx of a bad request."""
        self.require_enabled()
        check_source(request.url, self.prefixes)
        settings = self.settings
        fps = request.fps if request.fps is not None else settings.stream_fps
        if fps > settings.stream_max_fps:
            raise BadRequest(
                f"fps {fps} is above the server's stream_max_fps {settings.stream_max_fps}", field="fps"
            )
        model = self._runtime.get(request.model, None)  # 404 for an unknown model
        parse_class_filter(request.classes, model.manifest.labels)  # 400 for an unknown class
        if self._pipeline is None or self._stopping:
            raise NotFound("stream sessions are not running (the server is starting or stopping)")
        if len(self._sessions) >= settings.max_streams:
            raise QueueFull(
                f"{len(self._sessions)} stream sessions are open (max_streams); delete one first",
                retry_after_s=60,
            )
        session_id = session_id or uuid.uuid4().hex[:12]
        if session_id in self._sessions:
            raise BadRequest(f"stream {session_id!r} exists already", field="id")
        reader = ReaderConfig(
            url=request.url,
            fps=fps,
            max_pixels=settings.stream_max_pixels,
            open_timeout_s=settings.stream_open_timeout_s,
            read_timeout_s=settings.stream_read_timeout_s,
            reconnect_initial_s=settings.stream_reconnect_initial_s,
            reconnect_max_s=settings.stream_reconnect_max_s,
            reconnect_attempts=settings.stream_reconnect_attempts,
            protocol_whitelist=PROTOCOL_WHITELIST,
            rtsp_probe_s=settings.stream_rtsp_probe_s,
            guard=self.guard,
        )
        limits = SessionLimits(
            max_lag_s=settings.stream_max_lag_ms / 1000,
            max_subscribers=settings.stream_max_subscribers,
            event_buffer=settings.stream_event_buffer,
            wait_batches=settings.stream_detect_wait_batches,
        )
        session = StreamSession(
            session_id,
            request,
            model.name,
            reader,
            pipeline=self._pipeline,
            runtime=self._runtime,
            metrics=self._metrics,
            predictor=self._predictor_factory(fps, settings.stream_predict_max_frames),
            scheduler=self.scheduler,
            limits=limits,
            batch_s=lambda: self._batch_s(model.name),
            declared=declared,
        )
        self._sessions[session_id] = session
        session.start()
        logger.info(
            "stream %s opened: %s (model %s, %s fps)", session_id, redact(request.url), model.name, fps
        )
        return session

    def _throughput(self, model_name: str) -> float | None:
        """The model's images per second in batches of stream frames (None: not known yet, or not loaded)."""
        try:
            batcher = self._runtime.get(model_name, None).batcher
        except ServiceError:  # unloaded meanwhile
            return None
        return None if batcher is None else batcher.throughput(batcher.stream_batch_size)

    def _batch_s(self, model_name: str) -> float | None:
        """Seconds one full batch of the model takes, as its batcher measures them (None: not known)."""
        try:
            batcher = self._runtime.get(model_name, None).batcher
        except ServiceError:
            return None
        if batcher is None or not batcher.batch_times.known:
            return None
        return batcher.batch_times.seconds(batcher.max_batch_size)

    def _spare(self, model_name: str) -> int:
        """A batch of stream frames when nothing waits for the model's detector (a batch may be running: the
        frames then wait on deck, so the detector starts them the moment it frees), else 0."""
        try:
            batcher = self._runtime.get(model_name, None).batcher
        except ServiceError:
            return 0
        return 0 if batcher is None or batcher.queue_depth > 0 else batcher.stream_batch_size

    def _report_budget(self, model_name: str, rate: float) -> None:
        self._metrics.budget_fps.labels(model_name).set(rate if math.isfinite(rate) else 0.0)

    def all(self) -> list[StreamSession]:
        self.require_enabled()
        return list(self._sessions.values())

    def get(self, session_id: str) -> StreamSession:
        self.require_enabled()
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFound(f"no stream {session_id!r}", field="id")
        return session

    async def delete(self, session_id: str) -> None:
        session = self.get(session_id)
        del self._sessions[session_id]
        await session.stop(self.settings.stream_read_timeout_s + 1)
        self._forget(session)
        logger.info("stream %s deleted", session_id)

    def _forget(self, session: StreamSession) -> None:
        self._metrics.sessions.labels("stopped").dec()
        self._metrics.forget(session.id)

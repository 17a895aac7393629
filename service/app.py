"""The FastAPI application: `create_app(settings)`.

The repository is scanned when the app is created (a broken one raises `RepositoryError` at once), and
so are the API keys (a missing key file raises `ApiKeyError`); the lifespan then loads, warms up and
starts every model in the background, so liveness answers immediately and readiness turns true when
all models serve. With ``grpc_port`` set, the Open Inference Protocol's gRPC server (`service.grpc`) starts
and stops in the same lifespan. On shutdown the batchers drain. Stream sessions (`service.streams`) are
owned by one `StreamManager`: it reads the declared streams when the app is created (a bad settings file
raises), opens them once the pipeline exists, and stops every session first on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from service.capture.recorder import SampleCapture
from service.grpc.server import GrpcServer
from service.grpc.servicer import ServingState
from service.http.auth import ApiKeyMiddleware, load_api_keys
from service.http.error_responses import install_error_handlers
from service.http.lifecycle import Lifecycle
from service.http.middleware import DetectRequestMiddleware
from service.http.openapi import install_openapi
from service.http.routes import captures, detect, health, metrics, models, streams
from service.http.web import install_web
from service.pipeline.entry import DetectionPipeline
from service.pipeline.shadow import ShadowRunner
from service.runtime.admission import Resources
from service.runtime.backends import BackendFactory, create_backend
from service.runtime.batching.inline import InlineWork
from service.runtime.heap import freeze_startup_heap, unfreeze_heap
from service.runtime.metrics import ServiceMetrics, serve_metrics
from service.runtime.model_control import ModelControl
from service.runtime.model_runtime import ModelRuntime
from service.runtime.repository import scan_repository, select_versions
from service.runtime.self_check import check_isa_environment
from service.settings import Settings
from service.streams.manager import StreamManager
from service.streams.metrics import StreamMetrics
from service.v2 import repository_routes as v2_repository
from service.v2 import routes as v2_models
from service.video.prediction import TrackPredictor
from service.video.tracking import Tracker, TrackerConfig

logger = logging.getLogger(__name__)


def _package_version() -> str:
    try:
        return version("detect")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0+unknown"


async def _freeze_when_loaded(runtime: ModelRuntime) -> None:
    """Once every startup model is loaded and warmed, freeze the heap out of full collections."""
    await runtime.wait_loaded()
    frozen = freeze_startup_heap()
    logger.info("garbage collector: %d startup objects frozen out of full collections", frozen)


def _stream_predictor(fps: float, max_predicted_frames: int) -> TrackPredictor:
    """A stream session's tracker, tuned to the frames per second it answers, that also answers the
    frames between detections (its new tracks start with the velocity of their first two detections, which
    are rarely consecutive frames)."""
    return TrackPredictor(Tracker(TrackerConfig.for_fps(fps, start_velocity=True)), max_predicted_frames)


@dataclass(frozen=True)
class _Parts:
    """What the app is made of, built before it exists: the lifespan starts and stops them, routes reach
    them through ``app.state``."""

    settings: Settings
    api_keys: list[str]
    metrics: ServiceMetrics
    lifecycle: Lifecycle
    inline: InlineWork
    runtime: ModelRuntime
    control: ModelControl
    capture: SampleCapture
    streams: StreamManager


def _build_parts(settings: Settings, backend_factory: BackendFactory) -> _Parts:
    """Scan the repository and the API keys (raising for a broken one) and make the service's parts."""
    entries = select_versions(scan_repository(settings.model_repository), settings.versions)
    api_keys = load_api_keys(settings)
    service_metrics = ServiceMetrics()
    lifecycle = Lifecycle(service_metrics)
    inline = InlineWork(
        settings.inline_max_ms / 1000, settings.inline_max_pixels, in_flight=lambda: lifecycle.in_flight
    )
    lifecycle.on_start = inline.arrived
    runtime = ModelRuntime(entries, settings, service_metrics, backend_factory, inline)
    control = ModelControl(runtime, settings)
    capture = SampleCapture(settings, service_metrics.registry)
    stream_manager = StreamManager(
        settings, runtime, StreamMetrics(service_metrics.registry), predictor_factory=_stream_predictor
    )
    service_metrics.track_readiness(lambda: runtime.ready and not lifecycle.draining)
    service_metrics.bound_memory(settings.body_memory_bytes + settings.image_memory_bytes)
    return _Parts(
        settings, api_keys, service_metrics, lifecycle, inline, runtime, control, capture, stream_manager
    )


def _lifespan(parts: _Parts) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: start the models, capture, metrics, streams and gRPC; on shutdown, drain and stop
    them in order."""
    settings, runtime, control, capture = parts.settings, parts.runtime, parts.control, parts.capture
    lifecycle, service_metrics, stream_manager = parts.lifecycle, parts.metrics, parts.streams

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        executor = ThreadPoolExecutor(settings.worker_threads, thread_name_prefix="detect-worker")
        app.state.resources = Resources.from_settings(settings, executor, parts.inline)
        shadow = ShadowRunner(
            runtime, settings.rollout_shadow_max_in_flight, settings.rollout_shadow_timeout_s
        )
        app.state.pipeline = DetectionPipeline(
            app.state.resources,
            settings.request_timeout_ms / 1000,
            in_flight=lifecycle,
            capture=capture,
            shadow=shadow,
        )
        # A folder that cannot be written turns capture off; it never stops the service from starting.
        await asyncio.to_thread(capture.start)
        metrics_server = (
            serve_metrics(service_metrics, settings.host, settings.metrics_port)
            if settings.metrics_port is not None
            else None
        )
        service_metrics.gc_pauses.install()
        runtime.start_loading()
        heap_frozen = asyncio.create_task(_freeze_when_loaded(runtime)) if settings.gc_freeze else None
        control.start_polling()
        stream_manager.start(app.state.pipeline)
        grpc_server = None
        if settings.grpc_port is not None:
            state = ServingState(
                settings, runtime, control, app.state.pipeline, lifecycle, service_metrics, app.version
            )
            grpc_server = GrpcServer(state, parts.api_keys)
            await grpc_server.start()
        app.state.grpc_server = grpc_server
        try:
            yield
        finally:
            lifecycle.begin_drain()
            await stream_manager.stop(settings.stream_read_timeout_s + 1)
            if grpc_server is not None:  # calls in flight finish first (the CLI drained them already)
                await grpc_server.stop(settings.drain_timeout_s)
            lifecycle.close()
            await control.stop()
            await shadow.stop()
            await runtime.stop(settings.drain_timeout_s)
            if heap_frozen is not None:
                heap_frozen.cancel()
                await asyncio.gather(heap_frozen, return_exceptions=True)
                unfreeze_heap()
            service_metrics.gc_pauses.remove()
            await asyncio.to_thread(capture.stop)  # after the drain: what the last requests queued is written
            executor.shutdown(wait=True, cancel_futures=True)
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()

    return lifespan


def _install_routes(app: FastAPI, parts: _Parts) -> None:
    """Error handlers, middleware (the API-key check outermost) and every router the settings ask for."""
    settings, api_keys = parts.settings, parts.api_keys
    install_error_handlers(app)
    app.add_middleware(DetectRequestMiddleware, lifecycle=parts.lifecycle, metrics=parts.metrics)
    if api_keys:  # added last, so it runs first: nothing else runs for a request without a key
        app.add_middleware(ApiKeyMiddleware, keys=api_keys)
    routers = (
        (detect, models, captures, streams, health)
        if settings.metrics_port is not None
        else (detect, models, captures, streams, health, metrics)
    )
    for module in routers:
        app.include_router(module.router)
    install_openapi(app, api_keys=bool(api_keys))
    install_web(app, docs=settings.docs)
    app.include_router(v2_models.router)
    if settings.repository_api:
        app.include_router(v2_repository.router)


def create_app(settings: Settings | None = None, *, backend_factory: BackendFactory | None = None) -> FastAPI:
    """The service app for ``settings`` (default: from the environment).

    ``backend_factory`` turns a repository entry into a backend (default `create_backend`); tests wrap
    it to observe or pace real backends. Raises `RepositoryError` for a broken model repository,
    `ApiKeyError` for an unreadable or empty key file and `UnknownIsaError` for an ``ONEDNN_MAX_CPU_ISA``
    oneDNN does not know (it would run another CPU class than the one asked for, silently).
    """
    check_isa_environment()
    settings = settings if settings is not None else Settings()
    parts = _build_parts(settings, backend_factory or create_backend)
    app = FastAPI(
        title="detect",
        version=_package_version(),
        description="Object detection over HTTP: dynamic batching, boxed images, Prometheus metrics.",
        lifespan=_lifespan(parts),
        docs_url=None,  # /docs and /redoc come from service.http.web, on assets served here (no CDN)
        redoc_url=None,
        openapi_url="/openapi.json" if settings.docs else None,
    )
    app.state.settings = settings
    app.state.metrics = parts.metrics
    app.state.lifecycle = parts.lifecycle
    app.state.runtime = parts.runtime
    app.state.control = parts.control
    app.state.capture = parts.capture
    app.state.streams = parts.streams
    _install_routes(app, parts)
    return app

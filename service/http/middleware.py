"""ASGI middleware around the detect endpoints: draining gate, status and latency metrics.

Requests in flight are counted by the pipeline once admitted (`Lifecycle.admitted`), not here: a
connection still sending its body is not yet work.

Pure ASGI (not BaseHTTPMiddleware) so it adds no task or buffering to the request path.
"""

from __future__ import annotations

import time

from opentelemetry.trace import Span
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ServiceUnavailable
from service.http.error_responses import error_response
from service.http.lifecycle import Lifecycle
from service.runtime import tracing
from service.runtime.metrics import NO_MODEL, ServiceMetrics

DETECT_PATHS = frozenset({"/detect", "/v1/detect"})


def is_inference_path(path: str) -> bool:
    """/detect, /v1/detect, and the Open Inference Protocol's ``/v2/models/.../infer``."""
    return path in DETECT_PATHS or (path.startswith("/v2/models/") and path.endswith("/infer"))


def started_at(request: Request) -> float:
    """When the request arrived (`time.monotonic`, stamped by `DetectRequestMiddleware`; now outside it)."""
    started: float = getattr(request.state, "started_at", time.monotonic())
    return started


class DetectRequestMiddleware:
    """For detect requests: 503 while draining; otherwise record status and latency.

    The route stores the resolved model name in ``request.state.model`` for the ``model`` label.
    """

    def __init__(self, app: ASGIApp, *, lifecycle: Lifecycle, metrics: ServiceMetrics):
        self.app = app
        self.lifecycle = lifecycle
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_inference_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        state = scope.setdefault("state", {})
        state["started_at"] = started
        if self.lifecycle.draining:
            response = error_response(
                ServiceUnavailable("server is shutting down; retry on another replica", retry_after_s=1)
            )
            await response(scope, receive, send)
            self.metrics.observe_request(NO_MODEL, 503, time.monotonic() - started)
            return

        status = 500  # if the app raises before starting a response

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        span = _request_span(scope)
        token = tracing.REQUEST_SPAN.set(span) if span is not None else None
        try:
            await self.app(scope, receive, send_and_record)
        finally:
            model = state.get("model", NO_MODEL)
            self.metrics.observe_request(model, status, time.monotonic() - started)
            if span is not None and token is not None:
                tracing.REQUEST_SPAN.reset(token)
                span.set_attribute("detect.model", model)
                tracing.end_request_span(span, status)


def _request_span(scope: Scope) -> Span | None:
    """The request's trace span when tracing is on: ``POST /detect`` or ``POST /v2/models/{m}/infer``,
    continuing the caller's ``traceparent``."""
    traces = tracing.current()
    if not traces.enabled:
        return None
    path: str = scope["path"]
    route = path if path in DETECT_PATHS else "/v2/models/{model_name}/infer"
    headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
    attributes = {"http.request.method": scope["method"], "url.path": path, "http.route": route}
    return traces.request_span(f"{scope['method']} {route}", headers, attributes)

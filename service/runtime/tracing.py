"""OpenTelemetry traces of inference requests, off unless the standard environment variables ask for them.

``OTEL_TRACES_EXPORTER=otlp`` (or ``console``) turns them on at startup; the SDK's exporters read
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` and the rest themselves, and
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (or ``OTEL_EXPORTER_OTLP_PROTOCOL``) picks ``http/protobuf``
(default) or ``grpc``; ``OTEL_SERVICE_NAME`` names the service (default ``detect``).

What a trace holds:

- one server span per inference request (``POST /detect``, ``POST /v2/models/{m}/infer``), a child of
  the caller's W3C ``traceparent`` when one is sent;
- under it one span per stage, with the stage's own start and end: body read, decode, preprocess,
  queue_wait, inference, postprocess, encode or render (per image: a request of several images has
  several);
- one span per batch the model ran (``batch``, attributes ``detect.model`` and ``detect.batch_size``),
  linked from the ``inference`` span of every request it served, so a slow request leads to the batch
  it waited for and the requests it shared it with.

Off (the default), no tracer provider is installed and every call here returns after one attribute read:
`Tracing.enabled` is False and no span object is made.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode

log = logging.getLogger(__name__)

# The clocks stages are timed with -> wall-clock nanoseconds (what spans carry).
_PERF_TO_EPOCH_NS = time.time_ns() - time.perf_counter_ns()
_MONOTONIC_TO_EPOCH_NS = time.time_ns() - time.monotonic_ns()

# The server span of the request being handled (set by the HTTP middleware, read where a request's
# pipeline starts, on the event loop).
REQUEST_SPAN: ContextVar[Span | None] = ContextVar("detect_request_span", default=None)


def from_perf_counter(seconds: float) -> int:
    """A `time.perf_counter` reading as Unix-epoch nanoseconds."""
    return int(seconds * 1e9) + _PERF_TO_EPOCH_NS


def from_monotonic(seconds: float) -> int:
    """A `time.monotonic` reading as Unix-epoch nanoseconds."""
    return int(seconds * 1e9) + _MONOTONIC_TO_EPOCH_NS


@dataclass
class Tracing:
    """The process's tracer, or none (off)."""

    tracer: trace.Tracer | None = None
    provider: TracerProvider | None = None

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def request_span(self, name: str, headers: Mapping[str, str], attributes: dict[str, str]) -> Span | None:
        """A server span for one request, continuing the trace of its ``traceparent`` header if any."""
        if self.tracer is None:
            return None
        parent = propagate.extract(headers)
        return self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)

    def stage(
        self,
        parent: Span | None,
        name: str,
        started_ns: int,
        ended_ns: int,
        links: Sequence[SpanContext] = (),
    ) -> None:
        """A finished child span of ``parent`` between two epoch-nanosecond times."""
        if self.tracer is None or parent is None:
            return
        span = self.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            start_time=started_ns,
            links=[Link(context) for context in links],
        )
        span.end(end_time=ended_ns)

    def batch(self, batcher: str, size: int, started: float, ended: float) -> SpanContext | None:
        """A finished root span for one batch of ``batcher`` (``model:version``) between two
        `time.monotonic` times; its context, for the requests it served to link to."""
        if self.tracer is None:
            return None
        model, _, version = batcher.rpartition(":") if ":" in batcher else (batcher, "", "")
        span = self.tracer.start_span(
            "batch",
            context=trace.set_span_in_context(trace.INVALID_SPAN),  # its own trace: it serves many
            start_time=from_monotonic(started),
            attributes={"detect.model": model, "detect.model_version": version, "detect.batch_size": size},
        )
        span.end(end_time=from_monotonic(ended))
        context: SpanContext = span.get_span_context()
        return context

    def shutdown(self) -> None:
        """Export what is buffered and stop (at server shutdown)."""
        if self.provider is not None:
            self.provider.shutdown()


def end_request_span(span: Span | None, status: int) -> None:
    if span is None:
        return
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))
    span.end()


def end_rpc_span(span: Span | None, model: str, code: str, number: int) -> None:
    """End a gRPC call's span with its status (``OK`` or the error's code name)."""
    if span is None:
        return
    span.set_attribute("detect.model", model)
    span.set_attribute("rpc.grpc.status_code", number)
    if code != "OK":
        span.set_status(Status(StatusCode.ERROR, code))
    span.end()


_current = Tracing()


def current() -> Tracing:
    """The process's tracing (off until `configure` or `configure_from_environment`)."""
    return _current


def configure(provider: TracerProvider | None) -> Tracing:
    """Trace through ``provider`` (None: off). Tests pass one with an in-memory exporter."""
    global _current
    tracer = provider.get_tracer("detect") if provider is not None else None
    _current = Tracing(tracer, provider)
    return _current


def configure_from_environment(environ: Mapping[str, str] = os.environ) -> Tracing:
    """On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``); else off."""
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "none").strip().lower()
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or exporter_name in ("", "none"):
        return configure(None)
    exporter = _exporter(exporter_name, environ)
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "detect"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("traces: on, %s exporter", exporter_name)
    return configure(provider)


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER: expected otlp, console or none; got {name!r}")
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: expected http/protobuf or grpc; got {protocol!r}"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()

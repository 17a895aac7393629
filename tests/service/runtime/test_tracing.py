"""Traces: off by default; on, a request's span continues its ``traceparent``, holds a span per stage, and
its inference span links to the batch it ran in; exported over OTLP/HTTP to a collector on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from detect_testkit import MakeClient
from grpc_testkit import GrpcServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from service_testkit import encode, solid_image
from tritonclient import grpc as triton_grpc

from service.runtime import tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
STAGES = {"read_body", "decode", "preprocess", "queue_wait", "inference", "postprocess", "encode"}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.configure(None)


def _post_two_images(client: Any, **headers: str) -> Any:
    files = [("images", (f"{i}.png", encode(solid_image(80 + i)), "image/png")) for i in range(2)]
    response = client.post("/detect", files=files, headers=headers)
    assert response.status_code == 200, response.text
    return response


def test_off_by_default_and_from_the_environment() -> None:
    assert not tracing.current().enabled
    assert not tracing.configure_from_environment({}).enabled
    assert not tracing.configure_from_environment({"OTEL_TRACES_EXPORTER": "none"}).enabled
    on = tracing.configure_from_environment({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "x"})
    try:
        assert on.enabled and on.provider is not None
        assert on.provider.resource.attributes["service.name"] == "x"
    finally:
        on.shutdown()
        tracing.configure(None)
    with pytest.raises(ValueError, match="expected http/protobuf or grpc"):
        tracing.configure_from_environment(
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "carrier-pigeon"}
        )
    assert not tracing.current().enabled


def test_off_makes_no_span(make_client: MakeClient, toy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a span was started with tracing off")

    monkeypatch.setattr(SdkTracer, "start_span", refuse)
    _post_two_images(make_client(toy_repo), traceparent=TRACEPARENT)  # 200: no span started anywhere


def test_request_span_continues_the_callers_trace_with_a_span_per_stage(
    make_client: MakeClient, toy_repo: Path, spans: InMemorySpanExporter
) -> None:
    _post_two_images(make_client(toy_repo), traceparent=TRACEPARENT)
    finished = spans.get_finished_spans()
    (request,) = [s for s in finished if s.name == "POST /detect"]
    assert format(request.context.trace_id, "032x") == TRACE_ID
    assert request.parent is not None and format(request.parent.span_id, "016x") == PARENT_ID
    assert request.attributes is not None and request.attributes["http.response.status_code"] == 200
    assert request.attributes["detect.model"] == "toy"
    children = [s for s in finished if s.parent is not None and s.parent.span_id == request.context.span_id]
    names = [s.name for s in children]
    assert set(names) == STAGES
    assert names.count("decode") == names.count("inference") == 2  # one per image
    for child in children:  # inside the request, and in its trace
        assert child.context.trace_id == request.context.trace_id
        assert request.start_time <= child.start_time <= child.end_time <= request.end_time  # type: ignore[operator]
    _each_inference_links_to_its_batch(finished, children)


def _each_inference_links_to_its_batch(
    finished: tuple[ReadableSpan, ...], children: list[ReadableSpan]
) -> None:
    batches = {s.context.span_id: s for s in finished if s.name == "batch"}
    assert batches
    for inference in (s for s in children if s.name == "inference"):
        (link,) = inference.links
        batch = batches[link.context.span_id]
        attributes = dict(batch.attributes or {})
        assert attributes.keys() == {"detect.model", "detect.model_version", "detect.batch_size"}
        assert (attributes["detect.model"], attributes["detect.model_version"]) == ("toy", "1")
        assert 1 <= attributes["detect.batch_size"] <= 2  # type: ignore[operator]
        # The same interval (to the microsecond: both come from the batch's monotonic clock readings).
        assert abs(batch.start_time - inference.start_time) < 1000  # type: ignore[operator]
        assert abs(batch.end_time - inference.end_time) < 1000  # type: ignore[operator]


def test_open_inference_protocol_requests_are_traced(
    make_client: MakeClient, toy_repo: Path, spans: InMemorySpanExporter
) -> None:
    client = make_client(toy_repo)
    image = solid_image(9).ravel().tolist()
    body = {"inputs": [{"name": "images", "shape": [1, 64, 64, 3], "datatype": "UINT8", "data": image}]}
    assert (
        client.post("/v2/models/toy/infer", json=body, headers={"traceparent": TRACEPARENT}).status_code
        == 200
    )
    (request,) = [s for s in spans.get_finished_spans() if s.name == "POST /v2/models/{model_name}/infer"]
    assert format(request.context.trace_id, "032x") == TRACE_ID
    names = {
        s.name for s in spans.get_finished_spans() if s.parent and s.parent.span_id == request.context.span_id
    }
    assert {"read_body", "queue_wait", "inference"} <= names


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each export request's spans."""

    received: ClassVar[list[Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.received.extend((resource_spans.resource, span) for span in scope_spans.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_a_live_server_exports_over_otlp_http_to_a_collector(toy_repo: Path) -> None:
    """One /detect request and one gRPC ModelInfer call, each with its own traceparent."""
    _Collector.received = []
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_SERVICE_NAME": "detect-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms between exports
    }
    grpc_trace = "5" * 32
    server = GrpcServer(toy_repo, env)
    try:
        response = httpx.post(
            f"{server.url}/detect",
            content=encode(solid_image(120)),
            headers={"content-type": "image/png", "traceparent": TRACEPARENT},
            timeout=30,
        )
        assert response.status_code == 200
        images = triton_grpc.InferInput("images", [1, 64, 64, 3], "UINT8")
        images.set_data_from_numpy(solid_image(60)[None])
        server.client().infer("toy", [images], headers={"traceparent": f"00-{grpc_trace}-{PARENT_ID}-01"})

        def spans_of(trace_id: str) -> list[Any]:
            return [s for _, s in _Collector.received if s.trace_id.hex() == trace_id]

        server.wait_until(
            lambda: len(spans_of(TRACE_ID)) >= 1 + len(STAGES) and len(spans_of(grpc_trace)) >= 3,
            "the requests' spans at the collector",
        )
    finally:
        server.close()
        collector.shutdown()
        collector.server_close()
    names = {s.name for s in spans_of(TRACE_ID)}
    assert {"POST /detect", *STAGES} <= names
    (request,) = [s for s in spans_of(TRACE_ID) if s.name == "POST /detect"]
    assert request.parent_span_id.hex() == PARENT_ID
    resource = next(r for r, s in _Collector.received if s.trace_id.hex() == TRACE_ID)
    assert {a.key: a.value.string_value for a in resource.attributes}["service.name"] == "detect-under-test"
    grpc_names = {s.name for s in spans_of(grpc_trace)}
    assert {"inference.GRPCInferenceService/ModelInfer", "read_body", "queue_wait", "inference"} <= grpc_names

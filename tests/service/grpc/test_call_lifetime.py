"""Calls that end early or late: SIGTERM with a gRPC call in flight (readiness and health turn NOT_SERVING at
once, new calls get UNAVAILABLE, the call in flight completes, the process exits 0: the gRPC server stops in
the lifespan), and a client deadline passing while the call's image is queued."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_testkit import GrpcServer
from service_testkit import add_toy_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.slow


def images(value: int) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput("images", [1, 64, 64, 3], "UINT8")
    tensor.set_data_from_numpy(np.full((1, 64, 64, 3), value, np.uint8))
    return tensor


def test_sigterm_drains_grpc_calls_then_exits(tmp_path: Path) -> None:
    add_toy_model(tmp_path, "toy")
    # A long queue delay (idle dispatch off) keeps one call in flight, waiting for its batch.
    env = {"DETECT_MAX_QUEUE_DELAY_MS": "1500", "DETECT_DISPATCH_WHEN_IDLE": "false"}
    server = GrpcServer(tmp_path, env)
    try:
        client = server.client()
        with ThreadPoolExecutor(1) as pool, grpc.insecure_channel(server.grpc_url) as channel:
            in_flight = pool.submit(client.infer, "toy", [images(200)])
            server.wait_until(
                lambda: 'detect_queue_depth{model="toy"} 1.0' in httpx.get(f"{server.url}/metrics").text,
                "a queued call",
            )
            server.process.send_signal(signal.SIGTERM)
            server.wait_until(lambda: not client.is_server_ready(), "readiness to fail", timeout=5)
            assert not in_flight.done(), "readiness must fail before the call in flight completes"
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(InferenceServerException) as refused:
                server.client().infer("toy", [images(10)])
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
            assert "shutting down" in refused.value.message()
            scores = in_flight.result(timeout=30).as_numpy("detection_scores")
            assert scores[0, 0] == pytest.approx(200 / 255, abs=1e-3)
        assert server.process.wait(timeout=30) == 0
    finally:
        server.close()


def test_a_client_deadline_cancels_the_queued_work(tmp_path: Path) -> None:
    """A call whose deadline passes while its image waits for a batch: the client gets DEADLINE_EXCEEDED,
    the server counts it CANCELLED and drops the image before any inference runs."""
    add_toy_model(tmp_path, "toy")
    env = {"DETECT_MAX_QUEUE_DELAY_MS": "1500", "DETECT_DISPATCH_WHEN_IDLE": "false"}
    server = GrpcServer(tmp_path, env)

    def scraped(series: str) -> str:
        lines = httpx.get(f"{server.url}/metrics").text.splitlines()
        return next((line.split()[-1] for line in lines if line.startswith(series + " ")), "")

    try:
        with pytest.raises(InferenceServerException) as caught:
            server.client().infer("toy", [images(50)], client_timeout=0.3)
        assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        server.wait_until(
            lambda: scraped('detect_grpc_requests_total{code="CANCELLED",model="toy"}') == "1.0",
            "a cancelled call",
        )
        server.wait_until(lambda: scraped('detect_queue_depth{model="toy"}') == "0.0", "the queue to empty")
        assert scraped('detect_batch_size_count{model="toy"}') == "0.0", (
            "no batch ran for the cancelled image"
        )
    finally:
        server.close()

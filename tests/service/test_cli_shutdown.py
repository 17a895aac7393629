"""A real ``detect-serve`` process: serves, and on SIGTERM drains (readiness fails at once, the in-flight
request completes, new requests are refused) and then exits 0. Also: a broken repository exits 2."""

from __future__ import annotations

import re
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_testkit import PROJECT, Server, encode, serve_command, solid_image


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else -1.0


@pytest.mark.slow
def test_sigterm_drains_then_exits(toy_repo: Path) -> None:
    # A long queue delay (with idle dispatch off) keeps one request in flight, waiting for its batch,
    # while the test signals.
    server = Server(
        toy_repo,
        {
            "DETECT_MAX_QUEUE_DELAY_MS": "1500",
            "DETECT_DISPATCH_WHEN_IDLE": "false",
            "DETECT_INTRA_OP_THREADS": "1",
            "DETECT_INTER_OP_THREADS": "1",
        },
    )
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client, ThreadPoolExecutor(1) as pool:
            server.wait_until(lambda: client.get("/health/ready").status_code == 200, "readiness")
            png = encode(solid_image(200))
            in_flight = pool.submit(
                client.post, "/detect", content=png, headers={"content-type": "image/png"}
            )
            server.wait_until(
                lambda: metric(client.get("/metrics").text, 'detect_queue_depth{model="toy"}') == 1,
                "a queued request",
            )
            server.process.send_signal(signal.SIGTERM)
            server.wait_until(
                lambda: client.get("/health/ready").status_code == 503, "readiness to fail", timeout=5
            )
            assert not in_flight.done(), "readiness must fail before the in-flight request completes"
            assert client.get("/health/ready").json()["status"] == "draining"
            assert client.get("/health/live").status_code == 200
            refused = client.post("/detect", content=png, headers={"content-type": "image/png"})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            response = in_flight.result(timeout=30)
            assert response.status_code == 200
            assert response.json()["detections"][0]["score"] == pytest.approx(200 / 255, abs=1e-3)
        assert server.process.wait(timeout=30) == 0
        assert "draining" in server.full_log()
    finally:
        server.close()


def test_broken_repository_exits_2_with_a_reason(tmp_path: Path) -> None:
    result = subprocess.run(
        [*serve_command(), "--model-repository", str(tmp_path / "missing"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT,
    )
    assert result.returncode == 2
    assert "does not exist or is not a folder" in result.stderr


@pytest.mark.slow
def test_client_disconnect_removes_the_request_before_compute(toy_repo: Path) -> None:
    env = {
        "DETECT_MAX_QUEUE_DELAY_MS": "1000",
        "DETECT_DISPATCH_WHEN_IDLE": "false",
        "DETECT_INTRA_OP_THREADS": "1",
        "DETECT_WARMUP": "false",
    }
    server = Server(toy_repo, env)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            server.wait_until(lambda: client.get("/health/ready").status_code == 200, "readiness")
            png = encode(solid_image(200))
            with pytest.raises(httpx.ReadTimeout):  # gives up while the request waits for its batch
                httpx.post(
                    f"{server.url}/detect", content=png, headers={"content-type": "image/png"}, timeout=0.3
                )

            def scraped() -> str:
                return client.get("/metrics").text

            server.wait_until(
                lambda: metric(scraped(), 'detect_requests_total{code="499",model="toy"}') == 1, "a 499"
            )
            server.wait_until(
                lambda: metric(scraped(), 'detect_queue_depth{model="toy"}') == 0, "an empty queue"
            )
            # The batch it would have joined closed without it: nothing was computed.
            assert metric(scraped(), 'detect_batch_size_count{model="toy"}') == 0
            ok = client.post("/detect", content=png, headers={"content-type": "image/png"})
            assert ok.status_code == 200
            assert metric(scraped(), 'detect_batch_size_count{model="toy"}') == 1
    finally:
        server.close()

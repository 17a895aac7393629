"""The interactive client of `detect-bench streams`: Server-Timing parsing, the summary, and one window
against a loopback server from its own process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.streams.interactive import Probe, parse_server_timing, start_probe


def test_server_timing_is_parsed_into_milliseconds_per_stage() -> None:
    value = "decode;dur=1.250, queue_wait;dur=7.000, inference;desc=x;dur=15.5, total;dur=25.1, mark"
    assert parse_server_timing(value) == {
        "decode": 1.25, "queue_wait": 7.0, "inference": 15.5, "total": 25.1,
    }  # fmt: skip
    assert parse_server_timing("") == {}


def test_a_probe_summarizes_only_its_answered_requests() -> None:
    probe = Probe(
        answers=[(200, 10.0), (200, 30.0), (429, 1.0), (0, 30000.0), (200, 20.0)],
        stages=[{"inference": 8.0, "queue_wait": 1.0}, {"inference": 12.0}, {"inference": 10.0}],
    )
    assert probe.p(50) == 20.0
    assert probe.stage_p50() == {"inference": 10.0, "queue_wait": 1.0}
    assert Probe().p(50) is None and Probe().stage_p50() == {}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("server-timing", "inference;dur=4.000, total;dur=5.000")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_window_of_requests_from_a_process_of_its_own(loopback: str) -> None:
    start = time.time() + 2.0  # the spawned process imports meanwhile
    probe = start_probe(loopback, "m", b"\xff\xd8 not a real jpeg", start, start + 1.0).result(timeout=60)
    assert 3 <= len(probe.answers) <= 5  # one every 0.25 s for 1 s
    assert all(code == 200 for code, _ in probe.answers)
    assert probe.stage_p50() == {"inference": 4.0, "total": 5.0}

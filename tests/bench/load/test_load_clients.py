"""The load clients of ``detect-bench http`` (wrk closed loop, Poisson open loop, the rate search, CPU
accounting) against a tiny in-process HTTP server on 127.0.0.1 that answers like /detect and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from bench.load.http_load import BenchImage
from bench.load.open_loop import (
    OpenLoopResult,
    poisson_schedule,
    run_open_loop,
    search_max_rate,
    tail_summary,
    with_server_window,
)
from bench.load.open_loop_command import parse_duration_ms
from bench.load.proc_cpu import cpu_times, listener_pid
from bench.load.scrape import batch_size_counts, counter_total
from bench.load.wrk_client import parse_wrk_output, run_wrk, wrk_available

IMAGE = BenchImage("a.jpg", b"\xff\xd8not really a jpeg\xff\xd9", "image/jpeg")


@dataclass
class TinyServer:
    """Answers POST /detect after ``delay_s`` (one at a time when ``serial``: a busy single worker) and
    GET /metrics with a batch-size histogram counting one batch of 1 per answer."""

    delay_s: float = 0.0
    serial: bool = False
    fail_every: int = 0  # every n-th /detect answers 503
    arrivals: list[float] = field(default_factory=list)
    bodies: list[tuple[str, bytes]] = field(default_factory=list)
    port: int = 0
    _answered: int = 0

    def metrics(self) -> bytes:
        n = self._answered
        lines = [
            "# HELP detect_batch_size Images per inference batch",
            "# TYPE detect_batch_size histogram",
            f'detect_batch_size_bucket{{le="1.0",model="m"}} {n}',
            f'detect_batch_size_bucket{{le="2.0",model="m"}} {n}',
            f'detect_batch_size_bucket{{le="+Inf",model="m"}} {n}',
            f'detect_batch_size_sum{{model="m"}} {n}',
            f'detect_batch_size_count{{model="m"}} {n}',
        ]
        return ("\n".join(lines) + "\n").encode()

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lock: asyncio.Lock
    ) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
                headers = {k.lower(): v for k, v in headers.items()}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                status, payload = b"200 OK", b"{}"
                if request_line.startswith("GET /metrics"):
                    payload = self.metrics()
                else:
                    self.arrivals.append(time.monotonic())
                    index = len(self.arrivals)
                    self.bodies.append((headers.get("content-type", ""), body))
                    if self.serial:
                        async with lock:
                            await asyncio.sleep(self.delay_s)
                    else:
                        await asyncio.sleep(self.delay_s)
                    self._answered += 1
                    if self.fail_every and index % self.fail_every == 0:
                        status = b"503 Service Unavailable"
                writer.write(
                    b"HTTP/1.1 " + status + b"\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def serve() -> Iterator[TinyServer]:
    """Start (the test sets the server's behaviour before the first request) and stop a `TinyServer`."""
    server = TinyServer()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []
    handlers: list[asyncio.Task[None]] = []

    async def main() -> None:
        lock = asyncio.Lock()

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            task = asyncio.current_task()
            assert task is not None
            handlers.append(task)
            await server.handle(reader, writer, lock)

        tcp = await asyncio.start_server(connected, "127.0.0.1", 0)
        server.port = tcp.sockets[0].getsockname()[1]
        ready.set()
        await stop.wait()
        tcp.close()
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        for task in handlers:  # answers still queued behind the serial lock when the client went away
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await tcp.wait_closed()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield server
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()


def test_poisson_schedule_is_seeded_and_has_its_rate() -> None:
    a, b = poisson_schedule(200, 50, seed=3), poisson_schedule(200, 50, seed=3)
    assert np.array_equal(a, b) and not np.array_equal(a, poisson_schedule(200, 50, seed=4))
    assert np.all(np.diff(a) > 0) and a[0] >= 0 and a[-1] < 50
    assert abs(len(a) - 10_000) < 500  # Poisson: sd 100
    gaps = np.diff(a)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05  # exponential gaps: coefficient of variation 1
    with pytest.raises(ValueError):
        poisson_schedule(0, 1)


def test_tail_counts_failures_as_infinitely_slow() -> None:
    summary = tail_summary([0.010] * 98 + [math.inf] * 2)
    assert summary["p50"] == pytest.approx(10.0) and summary["p90"] == pytest.approx(10.0)
    assert summary["p99"] == math.inf and summary["mean"] == pytest.approx(10.0)
    assert tail_summary([0.010] * 200 + [math.inf])["p99"] == pytest.approx(10.0)


def test_open_loop_sends_on_schedule_while_answers_queue(serve: TinyServer) -> None:
    serve.delay_s, serve.serial = 0.04, True  # capacity 25/s, offered 60/s
    result = asyncio.run(run_open_loop(serve.url, [IMAGE], rate=60, duration_s=1.0, seed=1, model="m"))
    schedule = poisson_schedule(60, 1.0, seed=1)
    assert result.sent == len(schedule) == len(serve.arrivals) == result.ok
    # Every request reached the server on time, not after the one before it was answered.
    first = serve.arrivals[0]
    assert serve.arrivals[-1] - first < schedule[-1] - schedule[0] + 0.5
    # Latency counts from the scheduled send: the last requests waited for the whole backlog.
    backlog_s = 0.04 * result.sent - schedule[-1]
    assert result.latency_ms["max"] >= 0.9 * backlog_s * 1000
    assert result.batch_sizes == {"1": result.sent} and result.mean_batch_size == 1.0
    assert result.client_cpu_ms_per_request > 0


def test_open_loop_failures_reach_the_tail(serve: TinyServer) -> None:
    serve.fail_every = 10
    result = asyncio.run(run_open_loop(serve.url, [IMAGE], rate=100, duration_s=0.5, seed=2))
    assert (
        result.status_counts.get("503", 0) == result.sent // 10
        and result.ok == result.sent - result.sent // 10
    )
    assert result.latency_ms["p99"] == math.inf


def fake_run(rate: float, p99_ms: float) -> OpenLoopResult:
    return OpenLoopResult(
        rate=rate, seed=0, duration_s=1.0, sent=1, ok=1, achieved_rps=rate,
        latency_ms={"p50": p99_ms / 2, "p90": p99_ms, "p99": p99_ms}, status_counts={}, errors={},
        send_lag_ms={}, client_cpu_ms_per_request=0.0,
    )  # fmt: skip


@pytest.mark.parametrize("start", [1.0, 50.0])
def test_search_finds_the_highest_rate_inside_the_bound(start: float) -> None:
    # p99 = 10 ms per request/s: the bound of 100 ms holds up to exactly 10/s.
    best, runs = search_max_rate(lambda rate: fake_run(rate, 10 * rate), 100, start_rate=start, refinements=6)
    assert best is not None and 9.5 < best.rate <= 10.0
    assert best.rate == max(r.rate for r in runs if r.latency_ms["p99"] <= 100)
    assert any(r.rate > 10 for r in runs)  # the bound was bracketed from above


def test_search_reports_when_no_rate_holds() -> None:
    best, runs = search_max_rate(lambda rate: fake_run(rate, math.inf), 100, start_rate=8)
    assert best is None and min(r.rate for r in runs) <= 8 / 64


def test_durations_parse() -> None:
    assert (
        parse_duration_ms("100ms") == 100
        and parse_duration_ms("0.1s") == 100
        and parse_duration_ms("50") == 50
    )


def test_batch_size_counts_are_per_bucket() -> None:
    text = (
        "# TYPE detect_batch_size histogram\n"
        'detect_batch_size_bucket{le="1.0",model="m"} 3.0\n'
        'detect_batch_size_bucket{le="2.0",model="m"} 5.0\n'
        'detect_batch_size_bucket{le="+Inf",model="m"} 6.0\n'
        'detect_batch_size_bucket{le="1.0",model="x"} 9.0\n'
        'detect_batch_size_bucket{le="2.0",model="x"} 9.0\n'
        'detect_batch_size_bucket{le="+Inf",model="x"} 9.0\n'
        'detect_batch_size_sum{model="m"} 14.0\n'
        'detect_batch_size_count{model="m"} 6.0\n'
    )
    assert batch_size_counts(text, "m") == {"1": 3.0, "2": 2.0, "+Inf": 1.0}
    assert batch_size_counts(text, None)["1"] == 12.0


def test_solo_batches_over_a_window_come_from_the_counter() -> None:
    def metrics(a: float, b: float) -> str:
        """The counter as the server exposes it (prometheus-client's text format)."""
        registry = CollectorRegistry()
        solo = Counter(
            "detect_solo_batches", "Lone requests run on the solo graph", ["model"], registry=registry
        )
        solo.labels(model="m").inc(a)
        solo.labels(model="x").inc(b)
        return generate_latest(registry).decode()

    assert counter_total(metrics(3, 4), "detect_solo_batches", "m") == 3.0
    assert counter_total(metrics(3, 4), "detect_solo_batches", None) == 7.0
    assert counter_total("", "detect_solo_batches", "m") == 0.0  # a server without the counter
    result = OpenLoopResult(
        rate=1.0, seed=0, duration_s=1.0, sent=1, ok=1, achieved_rps=1.0, latency_ms={},
        status_counts={}, errors={}, send_lag_ms={}, client_cpu_ms_per_request=0.0,
    )  # fmt: skip
    assert with_server_window(result, metrics(3, 4), metrics(10, 4), "m").solo_batches == 7


def test_wrk_output_is_parsed() -> None:
    line = (
        'WRK_RESULT {"requests": 120, "duration_us": 2000000, "connect": 0, "read": 1, "write": 0, '
        '"status": 4, "timeout": 0, "p50": 10500, "p90": 12000, "p99": 20000, "mean": 11000.5, "max": 25000}'
    )
    result = parse_wrk_output("Running 2s test\n" + line + "\n", 0.01, 0.02)
    assert result.requests == 120 and result.ok == 115 and result.duration_s == 2.0
    assert result.latency_ms["p99"] == 20.0 and result.errors["status"] == 4
    with pytest.raises(ValueError, match="no result line"):
        parse_wrk_output("wrk: connection refused")


@pytest.mark.skipif(not wrk_available(), reason="wrk is not installed (scripts/dev/install-system-deps.sh)")
def test_wrk_posts_the_image(serve: TinyServer) -> None:
    serve.delay_s = 0.005
    result = run_wrk(serve.url, IMAGE.data, IMAGE.content_type, concurrency=2, duration_s=1, model="m")
    assert result.requests > 10 and result.ok == result.requests
    assert len(serve.bodies) >= result.requests
    assert set(serve.bodies) == {("image/jpeg", IMAGE.data)}
    assert result.latency_ms["p50"] >= 5.0
    assert result.cpu_user_s + result.cpu_system_s < 1.0  # wrk's own CPU, from wait4


def test_cpu_times_and_the_listening_pid() -> None:
    before = cpu_times(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert (cpu_times(os.getpid()) - before).total_s >= 0.03
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert listener_pid(listener.getsockname()[1]) == os.getpid()


def test_cpu_times_count_the_live_child_processes_too() -> None:
    import subprocess
    import sys

    from bench.load.proc_cpu import descendants

    burn = (
        "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"]
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            not descendants(parent.pid) or cpu_times(descendants(parent.pid)[0]).total_s < 0.3
        ):
            time.sleep(0.1)
        (child,) = descendants(parent.pid)
        whole, child_alone = cpu_times(parent.pid).total_s, cpu_times(child).total_s
        assert child_alone >= 0.3  # it burnt its 0.3 s
        assert whole >= child_alone and whole - child_alone < 0.2  # counted in the parent's; the parent idles
    finally:
        for pid in descendants(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


def test_a_thread_that_blocks_counts_voluntary_switches() -> None:
    before = cpu_times(os.getpid())
    for _ in range(20):
        waiter = threading.Event()
        thread = threading.Thread(target=waiter.wait, args=(5,))
        thread.start()
        waiter.set()
        thread.join()
    time.sleep(0.01)  # this thread blocks too
    assert (cpu_times(os.getpid()) - before).voluntary_switches >= 1


@pytest.mark.parametrize("client", ["lean", "httpx"])
def test_both_open_loop_clients_send_the_image_and_count_answers(serve: TinyServer, client: str) -> None:
    result = asyncio.run(
        run_open_loop(serve.url, [IMAGE], rate=80, duration_s=0.4, seed=3, model="m", client=client)
    )
    assert result.sent == result.ok == len(serve.bodies) > 0
    assert all(body == (IMAGE.content_type, IMAGE.data) for body in serve.bodies)
    assert result.status_counts == {"200": result.sent}
    with pytest.raises(ValueError, match="client must be one of"):
        asyncio.run(run_open_loop(serve.url, [IMAGE], rate=1, duration_s=0.1, client="curl"))


@pytest.mark.skipif(not wrk_available(), reason="wrk is not installed (scripts/dev/install-system-deps.sh)")
def test_wrk_open_loop_sends_on_schedule_while_answers_queue(serve: TinyServer) -> None:
    """A serial server answers 25/s; wrk offers 60/s for 2 s: the requests arrive at the offered rate (not
    at the answer rate, as a closed loop would send them), none late, and the wait shows in the tail."""
    serve.delay_s, serve.serial = 0.04, True
    result = asyncio.run(
        run_open_loop(serve.url, [IMAGE], rate=60, duration_s=2.0, seed=4, model="m", client="wrk")
    )
    arrived = len(serve.arrivals)
    assert 85 <= arrived <= 160, arrived  # Poisson at 60/s over 2 s: 120 +- 3.5 standard deviations
    assert result.ok <= 2.0 * 25 + 2 < arrived  # answered at the server's pace
    assert all(body == (IMAGE.content_type, IMAGE.data) for body in serve.bodies)
    assert result.send_lag_ms["late_share"] == 0.0
    assert result.latency_ms["p99"] > 500  # the backlog: the last answers waited for the queue
    assert result.mean_batch_size == 1.0  # the server's /metrics window was read around the run
    assert 0 < result.client_cpu_ms_per_request < 5


@pytest.mark.skipif(not wrk_available(), reason="wrk is not installed (scripts/dev/install-system-deps.sh)")
def test_wrk_open_loop_counts_failures_as_infinitely_slow(serve: TinyServer) -> None:
    serve.fail_every = 10
    result = asyncio.run(run_open_loop(serve.url, [IMAGE], rate=100, duration_s=1.0, seed=5, client="wrk"))
    assert result.status_counts["other"] >= 5 and result.latency_ms["p99"] == math.inf
    assert result.ok == result.status_counts["2xx"] and result.latency_ms["p50"] < 100

"""One closed-loop window driven by ``wrk``, as an `HttpLoadResult` (with the server's batch sizes and
stage times scraped from /metrics and the CPU of wrk and of the server over the window)."""

from __future__ import annotations

from bench.load import thread_cpu
from bench.load.http_load import BenchImage, HttpLoadResult, server_cpu
from bench.load.scrape import histogram_totals, window_gain
from bench.load.wrk_client import run_wrk


def run_wrk_load(
    url: str,
    image: BenchImage,
    *,
    concurrency: int,
    duration_s: float,
    model: str | None = None,
    warmup_s: float = 2.0,
    server_pid: int | None = None,
    threads: bool = False,
) -> HttpLoadResult:
    """``wrk`` POSTing ``image`` with ``concurrency`` connections: a warm-up run, then the measured one.
    ``threads``: also the server's CPU per thread group over the window (`bench.load.thread_cpu`)."""
    import httpx

    if warmup_s > 0:
        run_wrk(
            url, image.data, image.content_type, concurrency=concurrency, duration_s=warmup_s, model=model
        )
    before = histogram_totals(httpx.get(f"{url}/metrics").text, model)
    server_before = server_cpu(server_pid)
    by_tid = thread_cpu.snapshot(server_pid) if threads and server_pid is not None else None
    result = run_wrk(
        url, image.data, image.content_type, concurrency=concurrency, duration_s=duration_s, model=model
    )
    server_used = server_cpu(server_pid, server_before)
    per_thread: dict[str, float] = {}
    if by_tid is not None and server_pid is not None:
        after = thread_cpu.snapshot(server_pid)
        per_thread = thread_cpu.by_thread(server_pid, by_tid, after, thread_cpu.thread_names(server_pid))
    gained = window_gain(before, histogram_totals(httpx.get(f"{url}/metrics").text, model))
    batched_images, batches = gained.get("detect_batch_size", (0.0, 0.0))
    failed = {key: n for key, n in result.errors.items() if n and key != "status"}
    return HttpLoadResult(
        url=url,
        model=model,
        concurrency=concurrency,
        duration_s=result.duration_s,
        requests=result.requests,
        ok=result.ok,
        throughput_rps=result.ok / result.duration_s,
        latency_ms=result.latency_ms,
        status_counts={
            "2xx/3xx": result.requests - sum(result.errors.values()),
            "other": result.errors["status"],
        },
        errors=failed,
        mean_batch_size=batched_images / batches if batches > 0 else None,
        batches=int(batches),
        client_cpu_cores=(result.cpu_user_s + result.cpu_system_s) / result.duration_s,
        client="wrk",
        server_cpu_user_s=server_used.user_s if server_used else None,
        server_cpu_system_s=server_used.system_s if server_used else None,
        server_voluntary_switches=server_used.voluntary_switches if server_used else None,
        server_threads_cpu_s=per_thread,
        stage_totals={name: t for name, t in gained.items() if name != "detect_batch_size" and t[1] > 0},
    )

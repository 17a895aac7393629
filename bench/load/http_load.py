"""``detect-bench http``: closed-loop HTTP load against a running detect-serve.

``concurrency`` clients each send one image per request, back to back, for ``duration`` seconds (after
a warm-up that is not counted). Reports throughput, latency percentiles of successful requests, status
counts, and the mean batch size the server formed during the run (the delta of its
``detect_batch_size`` histogram). With ``--compare-backend MODEL_DIR`` it then measures the raw backend
at that mean batch size in the same run and prints HTTP / raw: the share of compute throughput that
survives serving.

Imports no torch; needs httpx (the ``bench`` extra, which ``make setup-serve`` installs), imported
when a run starts so ``--help`` works without it.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import numpy as np

from bench.load.proc_cpu import CpuTimes, cpu_times, listener_pid
from bench.load.scrape import histogram_totals, window_gain

if TYPE_CHECKING:
    from bench.server.backend_throughput import BackendThroughput, Yardstick

IMAGE_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".bmp": "image/bmp",
    ".webp": "image/webp",
}


@dataclass(frozen=True)
class BenchImage:
    name: str
    data: bytes
    content_type: str


@dataclass
class HttpLoadResult:
    url: str
    model: str | None
    concurrency: int
    duration_s: float
    requests: int
    ok: int
    throughput_rps: float  # successful requests (= images) per second
    latency_ms: dict[str, float]  # p50, p90, p99, mean, max of successful requests
    status_counts: dict[str, int]
    errors: dict[str, int]  # transport errors by exception type
    mean_batch_size: float | None  # from the server's metrics; None if it formed no batch
    batches: int
    # CPU the load client itself used over the measured window (cores busy on average): on a small
    # machine it competes with the server, so a result is only as good as this is small.
    client_cpu_cores: float = 0.0
    client: str = "python"  # the load client: "python" (httpx, this process) or "wrk"
    # The server process's CPU over the measured window (None: its pid was not found), user and system.
    server_cpu_user_s: float | None = None
    server_cpu_system_s: float | None = None
    server_voluntary_switches: int | None = None  # thread blocks (hand-offs, wake-ups) over the window
    server_threads_cpu_s: dict[str, float] = field(default_factory=dict)  # bench.load.thread_cpu groups
    raw_backend: dict[str, object] | None = field(default=None)
    http_over_raw: float | None = None
    rounds: int = 1
    # (seconds, observations) of each server stage histogram over the window: per image, but per batch
    # for inference (see service.runtime.metrics).
    stage_totals: dict[str, tuple[float, float]] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list, repr=False)  # not written to --json


def load_images(paths: Sequence[str | Path]) -> list[BenchImage]:
    """Image files from files and folders (searched recursively for .jpg/.jpeg/.png/.bmp/.webp)."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_TYPES)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such image file or folder: {path}")
    if not files:
        raise ValueError(f"no images found in {[str(p) for p in paths]}")
    return [
        BenchImage(p.name, p.read_bytes(), IMAGE_TYPES.get(p.suffix.lower(), "application/octet-stream"))
        for p in files
    ]


async def run_http_load(
    url: str,
    images: Sequence[BenchImage],
    *,
    concurrency: int = 16,
    duration_s: float = 20.0,
    model: str | None = None,
    warmup_s: float = 2.0,
    timeout_s: float = 60.0,
    server_pid: int | None = None,
) -> HttpLoadResult:
    """Drive ``url``'s POST /detect with ``concurrency`` closed-loop clients for ``duration_s`` seconds."""
    if concurrency < 1 or duration_s <= 0 or not images:
        raise ValueError(
            f"need concurrency >= 1, duration > 0 and images; got {concurrency}, {duration_s}, {len(images)}"
        )
    import httpx

    params = {"model": model} if model else {}
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:

        async def client_loop(index: int, stop_at: float, record: bool) -> None:
            i = index
            while time.monotonic() < stop_at:
                image = images[i % len(images)]
                i += concurrency
                started = time.perf_counter()
                try:
                    response = await client.post(
                        "/detect",
                        params=params,
                        content=image.data,
                        headers={"content-type": image.content_type},
                    )
                except httpx.HTTPError as exc:
                    if record:
                        errors[type(exc).__name__] += 1
                    continue
                if record:
                    statuses[str(response.status_code)] += 1
                    if response.is_success:
                        latencies.append(time.perf_counter() - started)

        if warmup_s > 0:
            stop_at = time.monotonic() + warmup_s
            await asyncio.gather(*(client_loop(i, stop_at, False) for i in range(concurrency)))
        before = histogram_totals((await client.get("/metrics")).text, model)
        server_before = server_cpu(server_pid)
        started, cpu_started = time.monotonic(), time.process_time()
        stop_at = started + duration_s
        await asyncio.gather(*(client_loop(i, stop_at, True) for i in range(concurrency)))
        elapsed = time.monotonic() - started
        client_cpu_s = time.process_time() - cpu_started
        server_used = server_cpu(server_pid, server_before)
        after = histogram_totals((await client.get("/metrics")).text, model)

    return _closed_loop_result(
        url,
        model,
        concurrency,
        elapsed,
        latencies,
        statuses,
        errors,
        client_cpu_s,
        server_used,
        window_gain(before, after),
    )


def _closed_loop_result(
    url: str,
    model: str | None,
    concurrency: int,
    elapsed: float,
    latencies: list[float],
    statuses: Counter[str],
    errors: Counter[str],
    client_cpu_s: float,
    server_used: CpuTimes | None,
    gained: dict[str, tuple[float, float]],
) -> HttpLoadResult:
    batched_images, batches = gained.get("detect_batch_size", (0.0, 0.0))
    ok = len(latencies)
    return HttpLoadResult(
        url=url,
        model=model,
        concurrency=concurrency,
        duration_s=elapsed,
        requests=sum(statuses.values()) + sum(errors.values()),
        ok=ok,
        throughput_rps=ok / elapsed,
        latency_ms=latency_summary(latencies),
        status_counts=dict(sorted(statuses.items())),
        errors=dict(errors),
        mean_batch_size=batched_images / batches if batches > 0 else None,
        batches=int(batches),
        client_cpu_cores=client_cpu_s / elapsed,
        server_cpu_user_s=server_used.user_s if server_used else None,
        server_cpu_system_s=server_used.system_s if server_used else None,
        server_voluntary_switches=server_used.voluntary_switches if server_used else None,
        stage_totals={name: t for name, t in gained.items() if name != "detect_batch_size" and t[1] > 0},
        latencies_s=latencies,
    )


def server_cpu(pid: int | None, since: CpuTimes | None = None) -> CpuTimes | None:
    """The server's CPU times now (or used since ``since``); None without a pid or once it is gone."""
    if pid is None:
        return None
    try:
        now = cpu_times(pid)
    except OSError:
        return None
    return now - since if since is not None else now


def local_server_pid(url: str) -> int | None:
    """The pid of the process serving ``url`` when it listens on this machine, else None."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    return listener_pid(parts.port or (443 if parts.scheme == "https" else 80))


def latency_summary(latencies: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99, mean and max in ms (empty without latencies)."""
    if not latencies:
        return {}
    ms = np.asarray(latencies) * 1000
    return {
        "p50": float(np.percentile(ms, 50)),
        "p90": float(np.percentile(ms, 90)),
        "p99": float(np.percentile(ms, 99)),
        "mean": float(ms.mean()),
        "max": float(ms.max()),
    }


def merge_rounds(rounds: list[HttpLoadResult]) -> HttpLoadResult:
    """One result from several measured windows: totals, and latencies and batch sizes over all."""
    first, duration = rounds[0], sum(r.duration_s for r in rounds)
    latencies = [t for r in rounds for t in r.latencies_s]
    batches = sum(r.batches for r in rounds)
    images = sum((r.mean_batch_size or 0.0) * r.batches for r in rounds)
    return HttpLoadResult(
        url=first.url,
        model=first.model,
        concurrency=first.concurrency,
        duration_s=duration,
        requests=sum(r.requests for r in rounds),
        ok=sum(r.ok for r in rounds),
        throughput_rps=sum(r.ok for r in rounds) / duration,
        latency_ms=latency_summary(latencies) if latencies else median_latency(rounds),
        status_counts=dict(sorted(sum((Counter(r.status_counts) for r in rounds), Counter()).items())),
        errors=dict(sum((Counter(r.errors) for r in rounds), Counter())),
        mean_batch_size=images / batches if batches else None,
        batches=batches,
        client_cpu_cores=sum(r.client_cpu_cores * r.duration_s for r in rounds) / duration,
        client=first.client,
        server_cpu_user_s=_sum_or_none([r.server_cpu_user_s for r in rounds]),
        server_cpu_system_s=_sum_or_none([r.server_cpu_system_s for r in rounds]),
        server_voluntary_switches=_int_sum_or_none([r.server_voluntary_switches for r in rounds]),
        server_threads_cpu_s=dict(sum((Counter(r.server_threads_cpu_s) for r in rounds), Counter())),
        rounds=len(rounds),
        stage_totals={
            name: (
                sum(r.stage_totals.get(name, (0.0, 0.0))[0] for r in rounds),
                sum(r.stage_totals.get(name, (0.0, 0.0))[1] for r in rounds),
            )
            for name in sorted({name for r in rounds for name in r.stage_totals})
        },
        latencies_s=latencies,
    )


def median_latency(rounds: Sequence[HttpLoadResult]) -> dict[str, float]:
    """Each latency figure's median over rounds (for a client that reports percentiles, not samples)."""
    keys = set.intersection(*(set(r.latency_ms) for r in rounds)) if rounds else set()
    return {key: float(np.median([r.latency_ms[key] for r in rounds])) for key in sorted(keys)}


def _sum_or_none(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _int_sum_or_none(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def compare_with_backend(
    result: HttpLoadResult,
    model_dir: str | Path,
    images: Sequence[BenchImage],
    duration_s: float,
    threads: int,
    yardstick: Yardstick = "pipeline",
) -> BackendThroughput:
    """Measure the raw pipeline or backend at the run's mean batch size and store it and HTTP/raw in
    ``result``."""
    from bench.server.backend_throughput import measure_backend_throughput
    from service.settings import Settings

    batch = max(1, round(result.mean_batch_size or 1))
    raw = measure_backend_throughput(
        model_dir,
        batch_size=batch,
        images=[image.data for image in images[:64]],
        duration_s=duration_s,
        model=result.model,
        settings=Settings(intra_op_threads=threads),
        yardstick=yardstick,
    )
    set_raw(result, [raw])
    return raw


def set_raw(result: HttpLoadResult, raws: list[BackendThroughput]) -> None:
    """Store the raw backend's throughput over ``raws`` (one per round) and HTTP/raw in ``result``."""
    seconds = sum(r.batches * r.batch_size / r.images_per_s for r in raws)
    images_per_s = sum(r.batches * r.batch_size for r in raws) / seconds if seconds > 0 else 0.0
    result.raw_backend = asdict(raws[0]) | {
        "images_per_s": images_per_s,
        "batches": sum(r.batches for r in raws),
        "rounds": len(raws),
    }
    result.http_over_raw = result.throughput_rps / images_per_s if images_per_s > 0 else math.nan


def format_report(result: HttpLoadResult) -> str:
    lat = result.latency_ms
    client_ms = result.client_cpu_cores * result.duration_s / result.ok * 1000 if result.ok else math.nan
    lines = [
        f"detect-bench http {result.url} model={result.model or '(default)'} "
        f"concurrency={result.concurrency} duration={result.duration_s:.1f}s"
        + (f" in {result.rounds} rounds, each followed by a raw-backend window" if result.rounds > 1 else ""),
        f"requests     {result.requests} (ok {result.ok})   throughput {result.throughput_rps:.2f} img/s",
        (
            f"latency ms   p50 {lat['p50']:.1f}  p90 {lat['p90']:.1f}  p99 {lat['p99']:.1f}  "
            f"mean {lat['mean']:.1f}  max {lat['max']:.1f}"
            if lat
            else "latency ms   (no successful request)"
        ),
        f"client CPU   {result.client_cpu_cores:.2f} cores busy on average (the {result.client} load client, "
        f"of {os.cpu_count()} on this machine; {client_ms:.2f} ms per request)",
        format_server_cpu(result),
        "server ms    "
        + (
            "  ".join(
                f"{name.removeprefix('detect_').removesuffix('_seconds')} {total / count * 1000:.2f}"
                + ("/batch" if name == "detect_inference_seconds" else "")
                for name, (total, count) in result.stage_totals.items()
            )
            or "(no stage observed)"
        )
        + "   (mean per image)",
        "status       "
        + ", ".join(f"{code}: {n}" for code, n in result.status_counts.items())
        + (f"   transport errors: {result.errors}" if result.errors else ""),
        (
            f"mean batch   {result.mean_batch_size:.2f} over {result.batches} batches"
            if result.mean_batch_size is not None
            else "mean batch   (no batch formed)"
        ),
    ]
    if result.raw_backend is not None:
        raw = result.raw_backend
        lines.append(
            f"raw {raw.get('yardstick', 'backend')}  {raw['images_per_s']:.2f} img/s at batch "
            f"{raw['batch_size']} ({raw['backend']})   "
            f"HTTP/raw {result.http_over_raw:.2f}"
        )
    return "\n".join(lines)


def format_server_cpu(result: HttpLoadResult) -> str:
    user, system = result.server_cpu_user_s, result.server_cpu_system_s
    if user is None or system is None or not result.ok:
        return "server CPU   (unknown: the server's pid was not found; --server-pid PID)"
    per = 1000 / result.ok
    return (
        f"server CPU   {(user + system) * per:.2f} ms per request (user {user * per:.2f}, system "
        f"{system * per:.2f}); {(user + system) / result.duration_s:.2f} cores busy on average"
        + (
            f"; {result.server_voluntary_switches / result.ok:.1f} thread blocks (voluntary switches) "
            "per request"
            if result.server_voluntary_switches is not None
            else ""
        )
    )

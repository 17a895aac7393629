"""Open-loop load with Poisson arrivals (MLPerf's server scenario) and the search for the highest rate
whose p99 latency stays within a bound.

Send times are drawn up front (exponential gaps at ``rate``, a fixed seed) and every request is sent at
its time whatever the earlier ones are doing: a slow answer never delays the next send. Latency counts
from the SCHEDULED send time, so a client or server stall shows in the tail instead of hiding it
(coordinated omission); a request that fails or does not answer counts as infinitely slow.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import numpy as np

from bench.load.lean_http import LeanClient, ProtocolError
from bench.load.scrape import batch_size_counts, counter_total, histogram_totals, window_gain

if TYPE_CHECKING:
    from bench.load.http_load import BenchImage

DEFAULT_SEED = 0
# The open loop's HTTP clients: "lean" (bench.load.lean_http), httpx, or wrk (bench.load.wrk_client: a C
# client, a small fraction of the Python clients' CPU per request).
OPEN_LOOP_CLIENTS = ("lean", "httpx", "wrk")


def poisson_schedule(rate: float, duration_s: float, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Send offsets (seconds from the start, increasing, all < ``duration_s``) of a Poisson process."""
    if not rate > 0 or not duration_s > 0:
        raise ValueError(f"need rate > 0 and duration > 0, got {rate} and {duration_s}")
    rng = np.random.default_rng(seed)
    expected = rate * duration_s
    gaps = rng.exponential(1.0 / rate, size=int(expected + 10 * math.sqrt(expected) + 10))
    offsets = np.cumsum(gaps)
    while offsets[-1] < duration_s:  # practically never: the draw covers ~10 standard deviations
        offsets = np.concatenate(
            [offsets, offsets[-1] + np.cumsum(rng.exponential(1.0 / rate, size=len(gaps)))]
        )
    return offsets[offsets < duration_s]


@dataclass
class OpenLoopResult:
    rate: float  # the target arrival rate
    seed: int
    duration_s: float
    sent: int
    ok: int
    achieved_rps: float  # successful answers per second of the schedule
    latency_ms: dict[str, float]  # from the scheduled send time; failures count as infinite
    status_counts: dict[str, int]
    errors: dict[str, int]
    send_lag_ms: dict[str, float]  # how late the client sent (mean, max): its own delay, inside latency
    client_cpu_ms_per_request: float
    batch_sizes: dict[str, int] = field(default_factory=dict)  # batch-size histogram over the window
    mean_batch_size: float | None = None
    stage_totals: dict[str, tuple[float, float]] = field(default_factory=dict)
    solo_batches: int = 0  # batches run on the solo graph over the window (DETECT_OPENVINO_SOLO_GRAPH)


def tail_summary(latencies: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99, mean and max in ms, where a failed request is ``inf`` (and so is any percentile
    it reaches)."""
    if not latencies:
        return {}
    ms = np.asarray(latencies, dtype=float) * 1000
    finite = ms[np.isfinite(ms)]
    return {
        "p50": float(np.percentile(ms, 50, method="higher")),
        "p90": float(np.percentile(ms, 90, method="higher")),
        "p99": float(np.percentile(ms, 99, method="higher")),
        "mean": float(finite.mean()) if len(finite) else math.inf,
        "max": float(ms.max()),
    }


async def run_open_loop(
    url: str,
    images: Sequence[BenchImage],
    *,
    rate: float,
    duration_s: float,
    seed: int = DEFAULT_SEED,
    model: str | None = None,
    timeout_s: float = 10.0,
    max_connections: int = 256,
    client: str = "lean",
) -> OpenLoopResult:
    """Send POST /detect at Poisson times of ``rate`` for ``duration_s`` and wait for every answer.

    ``client`` "lean" (`bench.load.lean_http`, a fraction of httpx's CPU per request), "httpx", or "wrk"
    (`bench.load.wrk_client.run_wrk_open_loop`: the first image only)."""
    import httpx

    if client not in OPEN_LOOP_CLIENTS:
        raise ValueError(f"client must be one of {OPEN_LOOP_CLIENTS}, got {client!r}")
    if client == "wrk":
        return await _wrk_open_loop(url, images[0], rate, duration_s, seed, model, timeout_s)
    offsets = poisson_schedule(rate, duration_s, seed)
    target = "/detect" + (f"?{urlencode({'model': model})}" if model else "")
    tally = _Tally()
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    lean = LeanClient(url, max_connections=max_connections)
    prepared = [lean.build_post(target, i.data, i.content_type) for i in images] if client == "lean" else []
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as scraper:

        async def post(index: int) -> int:
            if client == "lean":
                status, _ = await asyncio.wait_for(lean.send(prepared[index % len(prepared)]), timeout_s)
                return status
            image = images[index % len(images)]
            headers = {"content-type": image.content_type}
            response = await scraper.post(target, content=image.data, headers=headers)
            return response.status_code

        async def send(index: int, scheduled: float) -> None:
            tally.lags.append(time.monotonic() - scheduled)
            try:
                status = await post(index)
            except (httpx.HTTPError, OSError, ProtocolError, TimeoutError) as exc:
                tally.errors[type(exc).__name__] += 1
                tally.latencies.append(math.inf)
                return
            tally.statuses[str(status)] += 1
            tally.latencies.append(time.monotonic() - scheduled if 200 <= status < 300 else math.inf)

        before_text = (await scraper.get("/metrics")).text
        cpu_started = time.process_time()
        await _send_on_schedule(offsets, send)
        client_cpu_s = time.process_time() - cpu_started
        lean.close()
        after_text = (await scraper.get("/metrics")).text

    result = tally.result(rate, seed, duration_s, len(offsets), client_cpu_s)
    return with_server_window(result, before_text, after_text, model)


@dataclass
class _Tally:
    """What an open-loop run counted: each request's latency (inf: failed), how late each was sent, the
    answers' statuses and the client errors."""

    latencies: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def result(
        self, rate: float, seed: int, duration_s: float, sent: int, client_cpu_s: float
    ) -> OpenLoopResult:
        ok = sum(1 for t in self.latencies if math.isfinite(t))
        lag_ms = np.asarray(self.lags) * 1000
        return OpenLoopResult(
            rate=rate,
            seed=seed,
            duration_s=duration_s,
            sent=sent,
            ok=ok,
            achieved_rps=ok / duration_s,
            latency_ms=tail_summary(self.latencies),
            status_counts=dict(sorted(self.statuses.items())),
            errors=dict(self.errors),
            send_lag_ms={"mean": float(lag_ms.mean()), "max": float(lag_ms.max())} if len(self.lags) else {},
            client_cpu_ms_per_request=client_cpu_s / sent * 1000 if sent else 0.0,
        )


async def _send_on_schedule(
    offsets: np.ndarray, send: Callable[[int, float], Coroutine[None, None, None]]
) -> None:
    """Start ``send(index, scheduled)`` at each offset (s) from now + 50 ms, then wait for them all."""
    start = time.monotonic() + 0.05
    tasks: list[asyncio.Task[None]] = []
    for index, offset in enumerate(offsets):
        scheduled = start + float(offset)
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(index, scheduled)))
    await asyncio.gather(*tasks)


async def _wrk_open_loop(
    url: str,
    image: BenchImage,
    rate: float,
    duration_s: float,
    seed: int,
    model: str | None,
    timeout_s: float,
) -> OpenLoopResult:
    import httpx

    from bench.load.wrk_client import run_wrk_open_loop

    async with httpx.AsyncClient(base_url=url, timeout=timeout_s) as scraper:
        before_text = (await scraper.get("/metrics")).text
        run = await asyncio.to_thread(
            run_wrk_open_loop, url, image.data, image.content_type, rate=rate, duration_s=duration_s,
            seed=seed, model=model, timeout_s=timeout_s,
        )  # fmt: skip
        after_text = (await scraper.get("/metrics")).text
    errors = {k: v for k, v in run.errors.items() if v and k != "status"}
    sent = run.requests + run.errors["connect"] + run.errors["write"]
    result = OpenLoopResult(
        rate=rate,
        seed=seed,
        duration_s=run.duration_s,
        sent=sent,
        ok=run.ok,
        achieved_rps=run.ok / run.duration_s if run.duration_s else 0.0,
        latency_ms=_tail_with_failures(run.latency_ms, sent - run.ok, sent),
        status_counts={"2xx": run.ok, "other": run.errors["status"]},
        errors=errors,
        send_lag_ms={
            "mean": run.late_sum_ms / max(1, run.arrivals),
            "max": run.late_max_ms,
            "late_share": run.late / max(1, run.arrivals),
        },
        client_cpu_ms_per_request=(run.cpu_user_s + run.cpu_system_s) / sent * 1000 if sent else 0.0,
    )
    return with_server_window(result, before_text, after_text, model)


def _tail_with_failures(latency_ms: dict[str, float], failed: int, total: int) -> dict[str, float]:
    """wrk's percentiles of the answered requests, with failures counted as infinitely slow: a percentile
    the failures reach is ``inf`` (as `tail_summary` counts them)."""
    share = failed / total if total else 0.0
    tail = dict(latency_ms)
    for key, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99)):
        if share > 1 - q:
            tail[key] = math.inf
    if failed:
        tail["max"] = math.inf
    return tail


def with_server_window(
    result: OpenLoopResult, before_text: str, after_text: str, model: str | None
) -> OpenLoopResult:
    """``result`` with the server's batch sizes and stage totals over the run (/metrics before and after)."""
    gained = window_gain(histogram_totals(before_text, model), histogram_totals(after_text, model))
    batched, batches = gained.get("detect_batch_size", (0.0, 0.0))
    before_sizes, after_sizes = batch_size_counts(before_text, model), batch_size_counts(after_text, model)
    sizes = {le: int(n - before_sizes.get(le, 0)) for le, n in after_sizes.items()}
    result.batch_sizes = {le: n for le, n in sizes.items() if n > 0}
    result.mean_batch_size = batched / batches if batches > 0 else None
    result.stage_totals = {name: t for name, t in gained.items() if name != "detect_batch_size" and t[1] > 0}
    solo = "detect_solo_batches"
    gained_solo = counter_total(after_text, solo, model) - counter_total(before_text, solo, model)
    result.solo_batches = int(gained_solo)
    return result


def search_max_rate(
    measure: Callable[[float], OpenLoopResult],
    bound_ms: float,
    *,
    start_rate: float,
    growth: float = 1.5,
    refinements: int = 4,
    max_rate: float = 10_000.0,
) -> tuple[OpenLoopResult | None, list[OpenLoopResult]]:
    """The highest measured rate whose p99 <= ``bound_ms``, and every run in order.

    Grows the rate by ``growth`` from ``start_rate`` while the bound holds (halving it first while it
    does not), then bisects ``refinements`` times between the last rate that held and the first that
    did not. Returns (None, runs) when no rate down to ``start_rate / 64`` holds.
    """
    if not start_rate > 0 or not growth > 1:
        raise ValueError(f"need start_rate > 0 and growth > 1, got {start_rate} and {growth}")
    runs: list[OpenLoopResult] = []

    def holds(rate: float) -> bool:
        runs.append(measure(rate))
        return runs[-1].latency_ms.get("p99", math.inf) <= bound_ms

    low: float | None = None
    high: float | None = None
    rate = start_rate
    if holds(rate):
        low = rate
        while high is None and rate * growth <= max_rate:
            rate *= growth
            if holds(rate):
                low = rate
            else:
                high = rate
    else:
        high = rate
        while low is None and rate > start_rate / 64:
            rate /= 2
            if holds(rate):
                low = rate
            else:
                high = rate
    if low is None:
        return None, runs
    for _ in range(refinements if high is not None else 0):
        assert high is not None
        middle = (low + high) / 2
        if holds(middle):
            low = middle
        else:
            high = middle
    best = max((r for r in runs if r.latency_ms.get("p99", math.inf) <= bound_ms), key=lambda r: r.rate)
    return best, runs

"""``detect-bench streams``: N synthetic cameras against one detect-serve, for each N asked.

The benchmark serves N synthetic 640x480 MJPEG cameras at 15 fps on 127.0.0.1 (`SourceServer`), starts
``detect-serve`` on the model repository (its default model unless ``--model``) allowing exactly those
sources, opens N stream sessions, and after a warm-up measures for ``--duration`` seconds: frames
processed per second per stream (from ``GET /v1/streams``), frames dropped, the lag from capture to
event of every event received over Server-Sent Events (p50, p99), the latency of an interactive client's
``POST /detect`` of a sample image every 0.25 s beside the streams (p50, p99: the priority at work; the
client runs in a process of its own, `bench.streams.interactive`, and measures its idle p50 alone before
the sessions open), the share of the window the detector ran, and the server's CPU use (its process's
user + system time; 100% = one core) and resident memory. Each N is one JSON line in ``--out``; an N
already there for the same model, fps and duration is skipped, so an interrupted run resumes.

    detect-bench streams --streams 1,2,4,8,16 --duration 20 --out docs/results/streams.jsonl

Imports no torch; needs httpx (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.load.proc_cpu import cpu_times
from bench.load.scrape import histogram_totals, window_gain
from bench.server.local_server import local_server
from bench.streams.interactive import start_probe
from bench.streams.sources import SAMPLES, SourceServer

# Seconds of interactive requests alone, before the sessions open: the idle p50.
IDLE_PROBE_S = 5.0


@dataclass
class StreamsResult:
    streams: int
    model: str
    fps: float
    duration_s: float
    processed_fps: list[float]  # per stream
    processed_fps_mean: float
    processed_fps_min: float
    # Of those, frames the detector ran on (the others answered by the tracker: docs/streams.md).
    detected_fps_mean: float
    detected_fps_min: float
    input_fps_mean: float
    dropped: list[int]  # per stream, during the window
    lag_ms_p50: float | None
    lag_ms_p99: float | None
    events: int
    # One interactive client beside the streams, in a process of its own: POST /detect of a sample image
    # every 0.25 s; the same client alone before the sessions open gives the idle p50 to compare with.
    interactive_requests: int
    interactive_ok: int
    interactive_ms_p50: float | None
    interactive_ms_p99: float | None
    interactive_idle_ms_p50: float | None
    # Medians of the interactive answers' Server-Timing stages (ms), beside the streams and idle.
    interactive_stages_ms_p50: dict[str, float]
    interactive_idle_stages_ms_p50: dict[str, float]
    server_cpu_percent: float  # 100 = one core
    # Share of the window the model's detector was running a batch (its inference seconds / the window):
    # near 1 means it never idled while frames waited.
    detector_busy: float
    # The stream budget (frames/s, ``detect_stream_budget_fps``: mean of its value at the window's start and
    # end) and the share of it the detections used (all streams' detected fps / budget; over 1: the
    # detector's idle time went to frames beyond the budget).
    budget_fps: float | None
    budget_used: float | None
    # The model's batches in the window (stream frames and interactive requests): mean images, mean ms.
    batch_mean: float | None
    batch_ms_mean: float | None
    server_rss_mb: float  # the server's resident memory at the end of the window
    load_average: tuple[float, float, float]
    cpus: int
    when: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", default="1,2,4,8,16", help="comma-separated numbers of streams")
    parser.add_argument("--model-repository", type=Path, default=Path("models"))
    parser.add_argument("--model", help="the model (default: the repository's default)")
    parser.add_argument("--fps", type=float, default=15.0, help="each camera's frame rate")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring, per N")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured, per N")
    parser.add_argument("--out", type=Path, default=Path("docs/results/streams.jsonl"))
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="extra server setting (repeatable)"
    )


def run(args: argparse.Namespace) -> int:
    import httpx

    counts = [int(n) for n in args.streams.split(",")]
    done = _done(args.out, args)
    with (
        SourceServer(fps=args.fps) as source,
        local_server(args.model_repository, _server_env(args, source.base_url)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        model = args.model or _default_model(client)
        for n in counts:
            if (model, n) in done:
                print(f"streams={n}: already in {args.out}, skipped")
                continue
            result = _measure(client, server.url, server.pid, source, model, n, args)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as out:
                out.write(json.dumps(asdict(result)) + "\n")
            print(_row(result), flush=True)
    return 0


def _done(path: Path, args: argparse.Namespace) -> set[tuple[str, int]]:
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        (r["model"], r["streams"]) for r in rows if r["fps"] == args.fps and r["duration_s"] == args.duration
    }


def _server_env(args: argparse.Namespace, sources: str) -> dict[str, str]:
    """The server may open exactly the benchmark's cameras, and enough of them; then ``--env`` items."""
    env = {"DETECT_STREAM_SOURCES": sources, "DETECT_MAX_STREAMS": "64"}
    env.update(item.split("=", 1) for item in args.env)
    return env


def _default_model(client: object) -> str:
    import httpx

    assert isinstance(client, httpx.Client)
    name: str = client.get("/v1/models").json()["default_model"]
    return name


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _measure(
    client: object, url: str, pid: int, source: SourceServer, model: str, n: int, args: argparse.Namespace
) -> StreamsResult:
    import httpx

    assert isinstance(client, httpx.Client)
    image = sorted(SAMPLES.glob("shapes-*.jpg"))[0].read_bytes()
    idle_start = time.time() + 1.0  # the probe's process starts meanwhile
    idle = start_probe(url, model, image, idle_start, idle_start + IDLE_PROBE_S).result()
    ids = []
    for i in range(n):
        body = {"url": source.url(f"mjpeg/cam{n}-{i}"), "model": model, "fps": args.fps}
        response = client.post("/v1/streams", json=body)
        response.raise_for_status()
        ids.append(response.json()["id"])
    lags: list[float] = []
    counting = threading.Event()
    stop = threading.Event()
    readers = [threading.Thread(target=_read_events, args=(url, i, lags, counting, stop)) for i in ids]
    for reader in readers:
        reader.start()
    window_start = time.time() + args.warmup
    asking = start_probe(url, model, image, window_start, window_start + args.duration)
    time.sleep(args.warmup)
    totals0, budget0 = _scrape(client, model)
    before, cpu0, t0 = _snapshot(client), cpu_times(pid).total_s, time.monotonic()
    counting.set()
    time.sleep(args.duration)
    counting.clear()
    after, cpu1, t1 = _snapshot(client), cpu_times(pid).total_s, time.monotonic()
    totals1, budget1 = _scrape(client, model)
    gained = window_gain(totals0, totals1)
    budget = (budget0 + budget1) / 2 if budget0 and budget1 else None
    rss_mb = _rss_mb(pid)
    stop.set()
    for stream_id in ids:
        client.delete(f"/v1/streams/{stream_id}")
    for reader in readers:
        reader.join(10)
    interactive = asking.result(timeout=60)
    elapsed = t1 - t0
    fps = [(after[i]["frames_processed"] - before[i]["frames_processed"]) / elapsed for i in ids]
    detected = [(after[i]["frames_detected"] - before[i]["frames_detected"]) / elapsed for i in ids]
    dropped = [int(after[i]["dropped_frames"] - before[i]["dropped_frames"]) for i in ids]
    values = np.array(lags) if lags else None
    return StreamsResult(
        streams=n,
        model=model,
        fps=args.fps,
        duration_s=args.duration,
        processed_fps=[round(f, 2) for f in fps],
        processed_fps_mean=round(float(np.mean(fps)), 2),
        processed_fps_min=round(float(np.min(fps)), 2),
        detected_fps_mean=round(float(np.mean(detected)), 2),
        detected_fps_min=round(float(np.min(detected)), 2),
        input_fps_mean=round(float(np.mean([after[i]["input_fps"] for i in ids])), 2),
        dropped=dropped,
        lag_ms_p50=None if values is None else round(float(np.percentile(values, 50)), 1),
        lag_ms_p99=None if values is None else round(float(np.percentile(values, 99)), 1),
        events=len(lags),
        interactive_requests=len(interactive.answers),
        interactive_ok=int(interactive.ok_ms.size),
        interactive_ms_p50=interactive.p(50),
        interactive_ms_p99=interactive.p(99),
        interactive_idle_ms_p50=idle.p(50),
        interactive_stages_ms_p50=interactive.stage_p50(),
        interactive_idle_stages_ms_p50=idle.stage_p50(),
        server_cpu_percent=round(100 * (cpu1 - cpu0) / elapsed, 1),
        detector_busy=round(gained.get("detect_inference_seconds", (0.0, 0.0))[0] / elapsed, 3),
        budget_fps=None if budget is None else round(budget, 1),
        budget_used=None if budget is None else round(float(np.sum(detected)) / budget, 3),
        batch_mean=_mean(gained, "detect_batch_size", 1.0),
        batch_ms_mean=_mean(gained, "detect_inference_seconds", 1000.0),
        server_rss_mb=round(rss_mb, 1),
        load_average=os.getloadavg(),
        cpus=os.cpu_count() or 0,
        when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def _snapshot(client: object) -> dict[str, dict[str, float]]:
    import httpx

    assert isinstance(client, httpx.Client)
    return {s["id"]: s for s in client.get("/v1/streams").json()["streams"]}


def _scrape(client: object, model: str) -> tuple[dict[str, tuple[float, float]], float | None]:
    """One read of /metrics: the model's histogram totals so far (``detect_inference_seconds``,
    ``detect_batch_size``, ...) and its stream budget now, frames per second (None: not known yet)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    assert isinstance(client, httpx.Client)
    text = client.get("/metrics").text
    budget = None
    for family in text_string_to_metric_families(text):
        if family.name == "detect_stream_budget_fps":
            for sample in family.samples:
                if sample.labels.get("model") == model and sample.value > 0:
                    budget = float(sample.value)
    return histogram_totals(text, model), budget


def _mean(gained: dict[str, tuple[float, float]], name: str, scale: float) -> float | None:
    total, count = gained.get(name, (0.0, 0.0))
    return round(scale * total / count, 2) if count else None


def _read_events(
    url: str, stream_id: str, lags: list[float], counting: threading.Event, stop: threading.Event
) -> None:
    import httpx

    try:
        with httpx.stream("GET", f"{url}/v1/streams/{stream_id}/events", timeout=30) as response:
            for line in response.iter_lines():
                if stop.is_set():
                    return
                if counting.is_set() and line.startswith('data: {"'):
                    lags.append(json.loads(line[6:])["lag_ms"])
    except httpx.HTTPError:
        return


def _row(r: StreamsResult) -> str:
    return (
        f"streams={r.streams:2d}  processed fps/stream mean {r.processed_fps_mean:5.2f}"
        f" min {r.processed_fps_min:5.2f}"
        f"  detected mean {r.detected_fps_mean:5.2f} min {r.detected_fps_min:5.2f}"
        f"  dropped {sum(r.dropped):5d}  lag p50 {r.lag_ms_p50} ms p99 {r.lag_ms_p99} ms"
        f"  /detect p50 {r.interactive_ms_p50} ms (idle {r.interactive_idle_ms_p50})"
        f" p99 {r.interactive_ms_p99} ms ({r.interactive_ok} ok)"
        f"  detector busy {r.detector_busy:.2f} (batch {r.batch_mean}, {r.batch_ms_mean} ms)"
        f"  budget {r.budget_fps} fps, used {r.budget_used}"
        f"  server CPU {r.server_cpu_percent:.0f}%"
        f" RSS {r.server_rss_mb:.0f} MB  load {r.load_average[0]:.2f}"
    )

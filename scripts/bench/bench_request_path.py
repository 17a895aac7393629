"""Request-path variants side by side: one server per variant, the load client alternating between them.

    .venv/bin/python scripts/bench/bench_request_path.py --model-repository /tmp/int8 \
        --images data/synth/val \
        --concurrency 1 --rounds 6 --window 3

Each variant is a ``detect-serve`` with its own ``DETECT_*`` settings (default: the previous request path,
a 5 ms queue delay without idle dispatch, against idle dispatch). Every round drives each server for
``--window`` seconds in turn and then times the raw backend for as long, so load from elsewhere on a
shared machine hits all of them alike. Prints img/s, HTTP/raw, latency and the client's CPU per variant.

``--client wrk`` drives the servers with wrk (a C client) instead of the in-process Python one, and each
line then also gives the server's CPU per request (user / system, from /proc). A variant's env may set
``PYTHONPATH`` to another checkout of the service to compare code revisions. ``--jsonl FILE`` appends one
line per variant.

A variant whose env has ``BENCH_SERVER=bare`` is not ``detect-serve`` but `bench.server.bare_server`: one
thread running each request inline, no batching (what the request path is measured against);
``BENCH_SERVER=litserve``: `bench.server.peer_litserve`, a LitServe server (a dev dependency) running the
bare app's pipeline with LitServe's dynamic batching (``BENCH_MAX_BATCH_SIZE``, ``BENCH_BATCH_TIMEOUT``); its
CPU counts its child processes:

    .venv/bin/python scripts/bench/bench_request_path.py --model-repository REPO --images IMG.jpg \
        --client wrk \
        --concurrency 1 --rounds 3 --window 8 \
        --variants '{"detect-serve": {}, "bare app": {"BENCH_SERVER": "bare"},
                     "litserve": {"BENCH_SERVER": "litserve"}}'

``--threads`` (with wrk) adds each server's CPU per request by thread (`bench.load.thread_cpu`: exact times
from /proc, threads named by py-spy), e.g. the inference thread, the image workers and the event loop
apart.

The raw yardstick is ``--raw pipeline`` (default: decode to JSON inline in this process, from the same
image bytes) or ``--raw backend`` (inference alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from bench.load.http_load import BenchImage, HttpLoadResult, load_images, merge_rounds, run_http_load
from bench.load.wrk_load import run_wrk_load
from bench.server.backend_throughput import BackendThroughput, measure_backend_throughput
from bench.server.local_server import free_port

VARIANTS = {
    "queue delay 5 ms, no idle dispatch": {
        "DETECT_DISPATCH_WHEN_IDLE": "false",
        "DETECT_MAX_QUEUE_DELAY_MS": "5",
    },
    "idle dispatch (default)": {},
}


def start(repository: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    # PYTHONSAFEPATH: `python -m` would put the working directory first on sys.path, ahead of a variant's
    # PYTHONPATH, and every variant would run the checkout the script runs from.
    quiet = {"DETECT_ACCESS_LOG": "false", "DETECT_LOG_LEVEL": "warning", "PYTHONSAFEPATH": "1"}
    full_env = os.environ | quiet | env
    command = [sys.executable, "-m", "service.cli", "--model-repository", repository, "--port", str(port)]
    if env.get("BENCH_SERVER") == "bare":
        command = [
            sys.executable,
            "-m",
            "bench.server.bare_server",
            "--model",
            repository,
            "--port",
            str(port),
        ]
    ready = "/health/ready"
    if env.get("BENCH_SERVER") == "litserve":  # bench.server.peer_litserve (litserve: a dev dependency)
        command = [sys.executable, "-m", "bench.server.peer_litserve", "--model", repository]
        command += ["--port", str(port)]
        for option, name in (
            ("--max-batch-size", "BENCH_MAX_BATCH_SIZE"),
            ("--batch-timeout", "BENCH_BATCH_TIMEOUT"),
        ):
            if name in env:
                command += [option, str(env[name])]
        ready = "/health"  # LitServe's: 200 once its worker has loaded the model
    process = subprocess.Popen(command, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}{ready}", timeout=5).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"server with {env} exited with {process.returncode}")
        time.sleep(0.5)
    process.terminate()
    raise SystemExit(f"server with {env} did not become ready")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-repository", required=True, help="a repository holding one model")
    parser.add_argument("--images", nargs="+", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per variant per round")
    parser.add_argument("--variants", type=json.loads, default=VARIANTS, help="JSON {name: {env}}")
    parser.add_argument("--client", choices=("python", "wrk"), default="python")
    parser.add_argument(
        "--raw-batch", type=int, help="the raw backend's batch (default: the last variant's mean)"
    )
    parser.add_argument("--raw", choices=("pipeline", "backend"), default="pipeline", help="raw yardstick")
    parser.add_argument("--jsonl", type=Path, help="append one JSON line per variant here")
    parser.add_argument(
        "--threads",
        action="store_true",
        help="with --client wrk: also each server's CPU per request by thread (bench.load.thread_cpu)",
    )
    return parser.parse_args()


def load_one(
    args: argparse.Namespace, images: list[BenchImage], process: subprocess.Popen[bytes], url: str
) -> HttpLoadResult:
    """One window of load on one variant's server, with the client ``args.client`` names."""
    if args.client == "wrk":
        return run_wrk_load(
            url,
            images[0],
            concurrency=args.concurrency,
            duration_s=args.window,
            warmup_s=1.0,
            server_pid=process.pid,
            threads=args.threads,
        )
    run = run_http_load(
        url,
        images,
        concurrency=args.concurrency,
        duration_s=args.window,
        warmup_s=0.5,
        server_pid=process.pid,
    )
    return asyncio.run(run)


def measure(
    args: argparse.Namespace, images: list[BenchImage]
) -> tuple[dict[str, list[HttpLoadResult]], list[BackendThroughput]]:
    """Every variant's server started, then ``args.rounds`` rounds: a window on each server in turn and the
    raw backend's throughput; the servers stopped."""
    servers = {name: start(args.model_repository, env) for name, env in args.variants.items()}
    results: dict[str, list[HttpLoadResult]] = {name: [] for name in servers}
    raws: list[BackendThroughput] = []
    try:
        for _ in range(args.rounds):
            for name, (process, url) in servers.items():
                results[name].append(load_one(args, images, process, url))
            last = results[list(servers)[-1]][-1]  # the raw backend runs at the last variant's batch size
            batch = args.raw_batch or max(1, round(last.mean_batch_size or 1))
            raws.append(
                measure_backend_throughput(
                    Path(args.model_repository),
                    batch_size=batch,
                    images=[i.data for i in images],
                    duration_s=args.window,
                    yardstick=args.raw,
                )
            )
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(30)
    return results, raws


def report(
    args: argparse.Namespace,
    name: str,
    rounds: list[HttpLoadResult],
    raw: float,
    raws: list[BackendThroughput],
) -> None:
    """One variant's line, and its JSON line appended to ``args.jsonl`` when given."""
    merged = merge_rounds(rounds)
    lat = merged.latency_ms
    # Per-round throughput median: with a shared machine, one disturbed window moves a mean.
    median_rps = float(np.median([r.throughput_rps for r in rounds]))
    user, system = merged.server_cpu_user_s, merged.server_cpu_system_s
    server = (
        f"server CPU {(user + system) * 1000 / merged.ok:.2f} ms/req (sys {system * 1000 / merged.ok:.2f})"
        if user is not None and system is not None and merged.ok
        else ""
    )
    client_ms = merged.client_cpu_cores * merged.duration_s * 1000 / max(merged.ok, 1)
    switches = (merged.server_voluntary_switches or 0) / max(merged.ok, 1)
    print(
        f"{name:40s} {median_rps:6.1f} img/s (median of rounds)  HTTP/raw {median_rps / raw:.2f}  "
        f"p50 {lat.get('p50', 0):.1f}  p99 {lat.get('p99', 0):.1f}  mean {lat.get('mean', 0):.1f} ms  "
        f"batch {merged.mean_batch_size or 0:.2f}  client CPU {client_ms:.2f} ms/req  {server}  "
        f"thread blocks {switches:.1f}/req"
    )
    threads = merged.server_threads_cpu_s
    per_thread = {name: round(seconds * 1000 / max(merged.ok, 1), 2) for name, seconds in threads.items()}
    if per_thread:
        print("    by thread, ms/req: " + "  ".join(f"{name} {ms:.2f}" for name, ms in per_thread.items()))
    if not args.jsonl:
        return
    line = {
        "variant": name,
        "env": args.variants[name],
        "client": args.client,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "window_s": args.window,
        "rps_median": median_rps,
        "rps_rounds": [r.throughput_rps for r in rounds],
        "raw_img_per_s": raw,
        "raw_batch": raws[-1].batch_size,
        "raw_yardstick": args.raw,
        "raw_cpu_ms_per_image": float(np.median([r.cpu_ms_per_image or 0.0 for r in raws])),
        "http_over_raw": median_rps / raw,
        "latency_ms": lat,
        "mean_batch": merged.mean_batch_size,
        "client_cpu_ms_per_request": client_ms,
        "server_cpu_ms_per_request": {
            "user": (user or 0) * 1000 / max(merged.ok, 1),
            "system": (system or 0) * 1000 / max(merged.ok, 1),
        },
        "server_voluntary_switches_per_request": switches,
        "server_threads_cpu_ms_per_request": per_thread,
        "load_average": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with args.jsonl.open("a") as out:
        out.write(json.dumps(line) + "\n")


def main() -> int:
    args = parse_args()
    images = load_images(args.images)
    results, raws = measure(args, images)
    seconds = sum(r.batches * r.batch_size / r.images_per_s for r in raws)
    raw = sum(r.batches * r.batch_size for r in raws) / seconds
    print(
        f"concurrency {args.concurrency}, {args.rounds} rounds x {args.window:g} s per variant; "
        f"raw {args.raw} {raw:.1f} img/s at batch {raws[-1].batch_size} ({raws[-1].backend}), "
        f"{np.median([r.cpu_ms_per_image or 0.0 for r in raws]):.2f} ms CPU/img"
    )
    for name, rounds in results.items():
        report(args, name, rounds, raw, raws)
    return 0


if __name__ == "__main__":
    sys.exit(main())

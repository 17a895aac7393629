"""``detect-bench http``'s command line: closed-loop load (the Python client or ``wrk``) with the raw
backend comparison, or open-loop Poisson load and its rate search (`bench.load.open_loop_command`).

    detect-bench http --client wrk --concurrency 16 --duration 30 --rounds 3 --images IMG \
        --compare-backend models/NAME/1
    detect-bench http --arrival poisson --search-p99 100ms --rate 20 --duration 20 --images IMG
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from bench.load.http_load import (
    HttpLoadResult,
    compare_with_backend,
    format_report,
    load_images,
    local_server_pid,
    merge_rounds,
    run_http_load,
    set_raw,
)
from bench.load.open_loop_command import add_open_loop_arguments, run_open_loop_command
from bench.load.wrk_load import run_wrk_load

if TYPE_CHECKING:
    from bench.server.backend_throughput import BackendThroughput


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="service base URL")
    parser.add_argument("--images", nargs="+", required=True, help="image files and/or folders")
    parser.add_argument("--concurrency", type=int, default=16, help="closed-loop clients")
    parser.add_argument(
        "--client",
        choices=("python", "wrk"),
        default="python",
        help="closed-loop load client: python (httpx, in this process) or wrk (C; its CPU is small next to "
        "the server's, which matters on a small machine; POSTs the first image)",
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        help="the server's pid, for its CPU per request (default: the local process listening on --url)",
    )
    add_open_loop_arguments(parser)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--model", help="model name (default: the server's default)")
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    parser.add_argument(
        "--compare-backend",
        metavar="MODEL_DIR",
        help="then measure this model folder's raw backend at the observed mean batch size",
    )
    parser.add_argument(
        "--raw",
        choices=("pipeline", "backend"),
        default="pipeline",
        help="the --compare-backend yardstick: pipeline (decode, resize, infer, detections, JSON inline in "
        "one thread, from the same image bytes) or backend (infer calls on resized inputs alone)",
    )
    parser.add_argument(
        "--backend-threads", type=int, default=0, help="intra-op threads for --compare-backend"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="split --duration into this many HTTP windows, each followed by an equally long raw backend "
        "window (with --compare-backend), so load from elsewhere on a shared machine hits both alike",
    )


def run(args: argparse.Namespace) -> int:
    import httpx  # noqa: F401  (missing: detect-bench names the extra before any work is done)

    if args.rounds < 1:
        print("detect-bench http: error: --rounds must be >= 1", file=sys.stderr)
        return 2
    images = load_images(args.images)
    server_pid = args.server_pid or local_server_pid(args.url)
    if args.arrival == "poisson":
        return run_open_loop_command(args, images, server_pid)
    window = args.duration / args.rounds
    rounds: list[HttpLoadResult] = []
    raws: list[BackendThroughput] = []
    for index in range(args.rounds):
        warmup = args.warmup if index == 0 else min(args.warmup, 1.0)
        if args.client == "wrk":
            result = run_wrk_load(
                args.url, images[0], concurrency=args.concurrency, duration_s=window, model=args.model,
                warmup_s=warmup, server_pid=server_pid,
            )  # fmt: skip
        else:
            result = asyncio.run(
                run_http_load(
                    args.url,
                    images,
                    concurrency=args.concurrency,
                    duration_s=window,
                    model=args.model,
                    warmup_s=warmup,
                    server_pid=server_pid,
                )
            )
        rounds.append(result)
        if args.compare_backend:
            raw_window = window if args.rounds > 1 else min(window, 10.0)
            raws.append(
                compare_with_backend(
                    result,
                    args.compare_backend,
                    images,
                    duration_s=raw_window,
                    threads=args.backend_threads,
                    yardstick=args.raw,
                )
            )
    result = merge_rounds(rounds) if len(rounds) > 1 else rounds[0]
    if raws:
        set_raw(result, raws)
    print(format_report(result))
    if args.json:
        report = asdict(result)
        del report["latencies_s"]
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if result.ok > 0 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="detect-bench http", description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))

"""The low-load tail: closed-loop concurrency 1 against Poisson arrivals at a fraction of that rate, on one
server, interleaved, with the server's stage times for each, so that what grows in the tail shows.

    .venv/bin/python scripts/bench/bench_low_load_tail.py --url http://127.0.0.1:8736 --model NAME \
        --images IMG --fraction 0.2 --rounds 3 --window 15 --jsonl docs/results/low-load-tail.jsonl

Each round: ``wrk`` at concurrency 1 for ``--window`` seconds, then Poisson arrivals at ``--fraction`` of
the closed-loop throughput just measured (seed = the round). Prints p50/p99 of both and the server's mean
decode, preprocess, queue wait and inference time (per batch) in each window, from /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from bench.load.http_load import load_images, local_server_pid
from bench.load.open_loop import run_open_loop
from bench.load.wrk_load import run_wrk_load

STAGES = ("decode", "preprocess", "queue_wait", "inference")


def stage_ms(totals: dict[str, tuple[float, float]]) -> dict[str, float]:
    out = {}
    for stage in STAGES:
        total, count = totals.get(f"detect_{stage}_seconds", (0.0, 0.0))
        if count:
            out[stage] = total / count * 1000
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model")
    parser.add_argument("--images", nargs="+", required=True)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--jsonl", type=Path)
    args = parser.parse_args()
    images = load_images(args.images)
    pid = local_server_pid(args.url)
    for index in range(args.rounds):
        closed = run_wrk_load(
            args.url,
            images[0],
            concurrency=1,
            duration_s=args.window,
            model=args.model,
            warmup_s=1.0,
            server_pid=pid,
        )
        rate = args.fraction * closed.throughput_rps
        opened = asyncio.run(
            run_open_loop(
                args.url, images[:1], rate=rate, duration_s=args.window, seed=index, model=args.model
            )
        )
        line = {
            "round": index,
            "model": args.model,
            "closed_c1": {"rps": closed.throughput_rps, "latency_ms": closed.latency_ms},
            "closed_stages_ms": stage_ms(closed.stage_totals),
            "poisson": {"rate": rate, "sent": opened.sent, "latency_ms": opened.latency_ms},
            "poisson_stages_ms": stage_ms(opened.stage_totals),
            "poisson_batch_sizes": opened.batch_sizes,
            "poisson_send_lag_ms": opened.send_lag_ms,
            "load_average": os.getloadavg(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        print(json.dumps(line), flush=True)
        if args.jsonl:
            with args.jsonl.open("a") as out:
                out.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

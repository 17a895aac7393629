"""MLPerf-style server scenario, A/B: servers with different settings under the same Poisson arrivals.

    .venv/bin/python scripts/bench/bench_server_scenario.py --model-repository REPO_WITH_ONE_MODEL \
        --images IMG --fractions 0.2 0.35 0.5 0.65 0.8 --window 12 --rounds 2 \
        --jsonl docs/results/server-scenario.jsonl --tag NAME

One ``detect-serve`` per variant (default: the fixed batching policy, the latency policy, and no batching
at all), started once. The raw pipeline's offline throughput at batch ``--raw-batch`` (``--raw pipeline``,
default: decode to JSON inline in one thread; ``--raw backend``: inference alone) sets the rates
(``--fractions`` of it, or ``--rates``). Every round runs every rate on every variant in turn (same seed,
so the same arrival times), interleaved, so load from elsewhere on a shared machine hits all alike; the
raw backend is timed again after each round. Per variant it prints p99 per rate (the median over rounds)
and the highest rate whose p99 <= ``--bound-ms``, with its share of the raw throughput. Every run is
appended to ``--jsonl``; with ``--tag``, runs already in that file for the tag are skipped (resume).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from bench_request_path import start

from bench.load.http_load import BenchImage, load_images, server_cpu
from bench.load.open_loop import OPEN_LOOP_CLIENTS, run_open_loop
from bench.server.backend_throughput import measure_backend_throughput

VARIANTS = {
    "fixed policy (default)": {},
    "latency policy": {"DETECT_BATCH_POLICY": "latency"},
    "no batching": {"DETECT_MAX_BATCH_SIZE": "1"},
}


def done_runs(path: Path | None, tag: str | None) -> dict[tuple[str, float, int], dict[str, object]]:
    if path is None or tag is None or not path.exists():
        return {}
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["variant"], r["rate"], r["round"]): r for r in runs if r.get("tag") == tag and "variant" in r}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-repository", required=True, help="a repository holding one model")
    parser.add_argument("--images", nargs="+", required=True)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.2, 0.35, 0.5, 0.65, 0.8])
    parser.add_argument("--rates", type=float, nargs="+", help="requests per second (instead of --fractions)")
    parser.add_argument("--window", type=float, default=12.0, help="seconds per rate per variant per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bound-ms", type=float, default=100.0)
    parser.add_argument("--raw-batch", type=int, default=8)
    parser.add_argument("--raw", choices=("pipeline", "backend"), default="pipeline", help="raw yardstick")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--client",
        choices=OPEN_LOOP_CLIENTS,
        default="lean",
        help="open-loop HTTP client (a variant's env may set BENCH_CLIENT to override it)",
    )
    parser.add_argument("--variants", type=json.loads, default=VARIANTS, help="JSON {name: {env}}")
    parser.add_argument("--jsonl", type=Path)
    parser.add_argument("--tag", help="names this run in --jsonl; runs already there under it are skipped")
    return parser.parse_args()


def run_one(
    args: argparse.Namespace,
    name: str,
    server: tuple[subprocess.Popen[bytes], str],
    images: list[BenchImage],
    rate: float,
    index: int,
) -> dict[str, object]:
    """One window of open-loop load at ``rate`` on variant ``name``'s server: the run's record, printed and
    appended to ``args.jsonl`` when given."""
    process, url = server
    before = server_cpu(process.pid)
    client = args.variants[name].get("BENCH_CLIENT", args.client)
    result = asyncio.run(
        run_open_loop(url, images, rate=rate, duration_s=args.window, seed=args.seed, client=client)
    )
    used = server_cpu(process.pid, before)
    run = {
        "tag": args.tag,
        "variant": name,
        "env": args.variants[name],
        "rate": rate,
        "round": index,
        "client": client,
        "server_cpu_ms_per_request": used.total_s * 1000 / max(result.sent, 1) if used else None,
        "load_average": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    } | asdict(result)
    lat = result.latency_ms
    print(
        f"round {index} rate {rate:6.2f}  {name:24s} "
        f"p50 {lat['p50']:7.1f}  p99 {lat['p99']:7.1f} ms  "
        f"batch {result.mean_batch_size or 0:.2f}  solo {result.solo_batches}  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    if args.jsonl:
        with args.jsonl.open("a") as out:
            out.write(json.dumps(run) + "\n")
    return run


def main() -> int:
    args = parse_args()
    images = load_images(args.images)
    image_bytes = [i.data for i in images]
    raw0 = measure_backend_throughput(
        args.model_repository, batch_size=args.raw_batch, images=image_bytes, yardstick=args.raw
    )
    rates = args.rates or [round(f * raw0.images_per_s, 2) for f in args.fractions]
    print(
        f"raw {args.raw} {raw0.images_per_s:.1f} img/s at batch {args.raw_batch}; rates {rates}", flush=True
    )
    previous = done_runs(args.jsonl, args.tag)
    servers = {name: start(args.model_repository, env) for name, env in args.variants.items()}
    runs: list[dict[str, object]] = list(previous.values())
    raws = [raw0.images_per_s]
    try:
        for index in range(args.rounds):
            for rate in rates:
                for name, server in servers.items():
                    if (name, rate, index) not in previous:
                        runs.append(run_one(args, name, server, images, rate, index))
            raw = measure_backend_throughput(
                args.model_repository, batch_size=args.raw_batch, images=image_bytes, yardstick=args.raw
            )
            raws.append(raw.images_per_s)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(30)
    raw_median = float(np.median(raws))
    summary = summarize(runs, servers, rates, args.bound_ms, raw_median)
    print(
        f"raw {args.raw}, median over {len(raws)} timings: {raw_median:.1f} img/s at batch {args.raw_batch}"
    )
    for line in summary:
        print(line)
    if args.jsonl:
        with args.jsonl.open("a") as out:
            record = {"tag": args.tag, "summary": summary, "raw_img_per_s": raws, "raw_yardstick": args.raw}
            out.write(json.dumps(record) + "\n")
    return 0


def summarize(
    runs: list[dict[str, object]], servers: dict[str, object], rates: list[float], bound_ms: float, raw: float
) -> list[str]:
    lines = []
    for name in servers:
        p99s, cells = {}, []
        for rate in rates:
            mine = [r for r in runs if r["variant"] == name and r["rate"] == rate]
            if not mine:
                continue
            p99s[rate] = float(np.median([r["latency_ms"]["p99"] for r in mine]))  # type: ignore[index]
            p50 = float(np.median([r["latency_ms"]["p50"] for r in mine]))  # type: ignore[index]
            batch = float(np.median([r["mean_batch_size"] or 0 for r in mine]))  # type: ignore[misc]
            cells.append(f"{rate:g}/s: p50 {p50:.0f} p99 {p99s[rate]:.0f} b{batch:.1f}")
        within = [rate for rate, p99 in p99s.items() if p99 <= bound_ms]
        best = max(within) if within else None
        found = f"{best:g}/s = {best / raw:.2f} of raw" if best is not None else "none of the rates"
        crossing = p99_crossing(p99s, bound_ms)
        if crossing is not None:
            found += f" (crossing {crossing:.1f}/s = {crossing / raw:.3f} of raw)"
        lines.append(f"{name:24s} max rate with p99 <= {bound_ms:g} ms: {found}   [{'; '.join(cells)}]")
    return lines


def p99_crossing(p99s: dict[float, float], bound_ms: float) -> float | None:
    """The rate at which the p99 first reaches ``bound_ms``: linear between the lowest rate over the bound and
    the rate run below it (a lucky higher rate within it does not count); None when the lowest rate is over
    it already or every rate run is within it."""
    rates = sorted(p99s)
    over = next((i for i, rate in enumerate(rates) if p99s[rate] > bound_ms), None)
    if not over:  # None: every rate within; 0: none
        return None
    low, high = rates[over - 1], rates[over]
    share = (bound_ms - p99s[low]) / (p99s[high] - p99s[low])
    return low + share * (high - low)


if __name__ == "__main__":
    sys.exit(main())

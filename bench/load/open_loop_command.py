"""``detect-bench http --arrival poisson``: the open-loop server scenario on the command line.

    detect-bench http --arrival poisson --rate 40 --duration 20 --images DIR
    detect-bench http --arrival poisson --search-p99 100ms --rate 10 --duration 20 --images DIR \\
        --compare-backend models/NAME/1

One rate, or (``--search-p99``) the highest rate whose p99 stays within the bound, starting the search at
``--rate``. With ``--compare-backend`` the raw backend's offline throughput at ``--raw-batch`` (default 8)
is measured after the search and the found rate is reported as a share of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from bench.load.open_loop import (
    DEFAULT_SEED,
    OPEN_LOOP_CLIENTS,
    OpenLoopResult,
    run_open_loop,
    search_max_rate,
)

if TYPE_CHECKING:
    from bench.load.http_load import BenchImage


def parse_duration_ms(text: str) -> float:
    """``"100ms"``, ``"0.1s"`` or ``"100"`` (milliseconds) as milliseconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 100ms or 0.1s)")
    value = float(match.group(1))
    return value * 1000 if match.group(2) == "s" else value


def add_open_loop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--arrival",
        choices=("closed", "poisson"),
        default="closed",
        help="closed: --concurrency clients back to back; poisson: open loop at --rate (MLPerf's server "
        "scenario; latency counts from each request's scheduled send time)",
    )
    parser.add_argument(
        "--rate", type=float, default=10.0, help="poisson: requests per second (search: start)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="poisson: the arrival schedule's seed")
    parser.add_argument(
        "--open-loop-client",
        choices=OPEN_LOOP_CLIENTS,
        default="lean",
        help="poisson: lean (asyncio protocol, a fraction of httpx's CPU per request, so it steals less "
        "from the server it measures and sends on time), httpx, or wrk (C, Lua-scheduled Poisson sends on "
        "256 connections: the least client CPU; the first image only, whole seconds)",
    )
    parser.add_argument(
        "--search-p99",
        type=parse_duration_ms,
        metavar="BOUND",
        help="poisson: find the highest rate whose p99 latency <= BOUND (e.g. 100ms)",
    )
    parser.add_argument("--refinements", type=int, default=4, help="search: bisection steps after bracketing")
    parser.add_argument(
        "--raw-batch", type=int, default=8, help="poisson: batch size of the raw offline figure"
    )


def format_run(run: OpenLoopResult, server_ms: tuple[float, float] | None) -> str:
    lat = run.latency_ms
    sizes = " ".join(f"<={le}:{n}" for le, n in run.batch_sizes.items())
    server = f"  server CPU {sum(server_ms):.2f} ms/req (sys {server_ms[1]:.2f})" if server_ms else ""
    return (
        f"rate {run.rate:7.2f}/s  sent {run.sent:5d}  ok {run.ok:5d}  p50 {lat.get('p50', math.nan):7.1f}  "
        f"p90 {lat.get('p90', math.nan):7.1f}  p99 {lat.get('p99', math.nan):7.1f} ms  "
        f"batch {run.mean_batch_size or 0:.2f} [{sizes}]  "
        f"send lag max {run.send_lag_ms.get('max', 0):.1f} ms  "
        f"client CPU {run.client_cpu_ms_per_request:.2f} ms/req{server}"
    )


def run_open_loop_command(
    args: argparse.Namespace, images: Sequence[BenchImage], server_pid: int | None
) -> int:
    from bench.load.http_load import server_cpu

    server_ms: dict[float, tuple[float, float] | None] = {}

    def measure(rate: float) -> OpenLoopResult:
        before = server_cpu(server_pid)
        result = asyncio.run(
            run_open_loop(
                args.url,
                images,
                rate=rate,
                duration_s=args.duration,
                seed=args.seed,
                model=args.model,
                client=args.open_loop_client,
            )
        )
        used = server_cpu(server_pid, before)
        server_ms[rate] = (
            (used.user_s * 1000 / result.sent, used.system_s * 1000 / result.sent) if used else None
        )
        print(format_run(result, server_ms[rate]), flush=True)
        return result

    if args.warmup > 0:
        asyncio.run(
            run_open_loop(
                args.url,
                images,
                rate=args.rate,
                duration_s=args.warmup,
                model=args.model,
                client=args.open_loop_client,
            )
        )
    if args.search_p99 is None:
        runs = [measure(args.rate)]
        best = runs[0]
    else:
        found, runs = search_max_rate(
            measure, args.search_p99, start_rate=args.rate, refinements=args.refinements
        )
        if found is None:
            print(f"no rate down to {args.rate / 64:.2f}/s kept p99 <= {args.search_p99:g} ms")
            return 1
        best = found
    report: dict[str, object] = {
        "arrival": "poisson",
        "bound_ms": args.search_p99,
        "best": asdict(best),
        "runs": [asdict(r) | {"server_cpu_ms_per_request": server_ms.get(r.rate)} for r in runs],
    }
    if args.compare_backend:
        from bench.server.backend_throughput import measure_backend_throughput
        from service.settings import Settings

        raw = measure_backend_throughput(
            args.compare_backend,
            batch_size=args.raw_batch,
            images=[image.data for image in images[:64]],
            duration_s=min(args.duration, 10.0),
            model=args.model,
            settings=Settings(intra_op_threads=args.backend_threads),
            yardstick=args.raw,
        )
        report["raw_backend"] = asdict(raw)
        report["rate_over_raw"] = best.rate / raw.images_per_s
        print(
            f"raw {raw.yardstick}  {raw.images_per_s:.2f} img/s offline at batch {raw.batch_size} "
            f"({raw.backend})"
        )
    what = f"highest rate with p99 <= {args.search_p99:g} ms" if args.search_p99 is not None else "rate"
    ratio = f" = {report['rate_over_raw']:.2f} of raw" if "rate_over_raw" in report else ""
    print(f"{what}: {best.rate:.2f}/s{ratio}\n{format_run(best, server_ms.get(best.rate))}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0

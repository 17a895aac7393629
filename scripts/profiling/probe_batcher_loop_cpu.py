"""The batcher's own event-loop CPU per request: `DynamicBatcher` with the service's metrics, driven by
concurrent callers in a closed loop, with a batch function that only sleeps (as a runtime's call does,
the interpreter lock released).

    .venv/bin/python scripts/profiling/probe_batcher_loop_cpu.py [--concurrency 16] [--workers 2] \
        [--batch-ms 4 1] [--seconds 3] [--rounds 3]

Each round prints the requests served per second and the event loop thread's CPU time per request
(`time.thread_time`): queueing, closing and dispatching batches, handing the outputs back, timing them,
metrics. Nothing of HTTP, images or inference is in it. To compare code revisions, run it with another
checkout first on ``PYTHONPATH`` (and ``PYTHONSAFEPATH=1``), as `scripts/bench/bench_request_path.py`
does (docs/benchmarks/request-path.md, "The event loop's own work per batch").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from service.runtime.batching.batcher import DynamicBatcher
from service.runtime.metrics import ServiceMetrics


async def _round(args: argparse.Namespace) -> tuple[float, float]:
    fixed_s, per_image_s = args.batch_ms[0] / 1000, args.batch_ms[1] / 1000

    def run_batch(items: list[int]) -> list[int]:
        time.sleep(fixed_s + per_image_s * len(items))
        return items

    batcher: DynamicBatcher[int, int] = DynamicBatcher(
        "probe",
        run_batch,
        max_batch_size=8,
        max_queue_delay_s=0.005,
        max_queue_size=4 * args.concurrency,
        metrics=ServiceMetrics().for_model("probe"),
        dispatch_when_idle=True,
        policy="adaptive",
        workers=args.workers,
    )
    batcher.start()
    served = 0
    end = 0.0

    async def caller(item: int) -> None:
        nonlocal served
        while time.monotonic() < end:
            await batcher.submit(item)
            served += 1

    for measured in (False, True):  # a first pass to warm up (and fit the batch times)
        served, end = 0, time.monotonic() + args.seconds
        started, cpu = time.monotonic(), time.thread_time()
        await asyncio.gather(*(caller(i) for i in range(args.concurrency)))
        if measured:
            elapsed, cpu = time.monotonic() - started, time.thread_time() - cpu
    await batcher.stop(timeout=5)
    return served / elapsed, cpu / served * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="inference workers (streams)")
    parser.add_argument("--batch-ms", type=float, nargs=2, default=[4.0, 1.0], metavar=("FIXED", "PER_IMAGE"))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    cpus = []
    for index in range(args.rounds):
        rate, cpu_us = asyncio.run(_round(args))
        cpus.append(cpu_us)
        print(f"round {index + 1}: {rate:.0f} req/s, event loop CPU {cpu_us:.1f} us per request")
    print(f"median: {statistics.median(cpus):.1f} us per request")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The server scenario's ceiling from a server's costs: the queueing model of `bench.model.queue_model`.

    .venv/bin/python scripts/bench/server_scenario_model.py --service 1=69.2 8=92.7 --raw 1=89.6 8=103.5 \
        [--rates 53.8 64.6 75.3] [--bound-ms 100] [--max-batch 8] [--goal-share 0.6]

``--service N=IMG_S``: the server's closed-loop throughput with batches of N (concurrency 1 gives batches of
1; concurrency 16 full batches of 8), e.g. from `scripts/bench/bench_request_path.py`. ``--raw N=IMG_S``: the
raw pipeline's throughput at batch N (decode to JSON in one thread, no server). Each fits a batch cost ``a + b
n`` ms. The script prints, per cost, the predicted p50/p90/p99 at ``--rates`` and the highest rate whose p99
stays within ``--bound-ms``, as a share of the raw throughput at ``--max-batch``; then how much of the
server's cost beyond the raw pipeline's may remain for that share to reach ``--goal-share``. ``--measure-raw
REPO --images IMG`` times the raw pipeline here instead of ``--raw``. """

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from bench.model.queue_model import BatchCost, highest_rate, simulate


def throughputs(items: list[str], value: str = "IMG_PER_S", example: str = "8=92.7") -> dict[int, float]:
    """``BATCH=VALUE`` arguments as {batch size: value}."""
    pairs = {}
    for item in items:
        size, sep, rate = item.partition("=")
        try:
            pairs[int(size)] = float(rate)
        except ValueError:
            raise SystemExit(f"{item!r}: expected BATCH={value}, e.g. {example}") from None
        if not sep:
            raise SystemExit(f"{item!r}: expected BATCH={value}, e.g. {example}")
    return pairs


def measured_raw(repository: str, images: list[str], sizes: list[int]) -> dict[int, float]:
    """The raw pipeline's images per second at each batch size: decode to JSON inline in one thread."""
    from bench.load.http_load import load_images
    from bench.server.backend_throughput import measure_backend_throughput

    data = [image.data for image in load_images(images)]
    return {
        n: measure_backend_throughput(
            repository, batch_size=n, images=data, yardstick="pipeline"
        ).images_per_s
        for n in sizes
    }


def scaled(raw: BatchCost, service: BatchCost, share: float) -> BatchCost:
    """The raw cost plus ``share`` of what the server adds to it."""
    return BatchCost(
        raw.fixed_ms + share * max(service.fixed_ms - raw.fixed_ms, 0.0),
        raw.per_request_ms + share * max(service.per_request_ms - raw.per_request_ms, 0.0),
    )


def overhead_budget(raw: BatchCost, service: BatchCost, target: float, args: argparse.Namespace) -> float:
    """The largest share (0..1) of the server's added cost that keeps the ceiling >= ``target`` req/s."""
    low, high = 0.0, 1.0
    for _ in range(10):
        middle = (low + high) / 2
        if highest_rate(scaled(raw, service, middle), args.bound_ms, args.max_batch, args.requests) >= target:
            low = middle
        else:
            high = middle
    return low


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--service", nargs="+", required=True, metavar="N=IMG_S")
    parser.add_argument("--raw", nargs="+", metavar="N=IMG_S")
    parser.add_argument(
        "--measure-raw", metavar="REPO", help="time the raw pipeline of this one-model repository"
    )
    parser.add_argument("--images", nargs="+", help="with --measure-raw")
    parser.add_argument("--rates", type=float, nargs="*", default=[])
    parser.add_argument("--bound-ms", type=float, default=100.0)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--goal-share", type=float, default=0.6)
    parser.add_argument("--requests", type=int, default=100_000, help="simulated requests per rate")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if (args.raw is None) == (args.measure_raw is None):
        raise SystemExit("give --raw or --measure-raw (with --images)")
    service_rates = throughputs(args.service)
    if args.measure_raw:
        if not args.images:
            raise SystemExit("--measure-raw needs --images")
        raw_rates = measured_raw(args.measure_raw, args.images, sorted({1, args.max_batch}))
    else:
        raw_rates = throughputs(args.raw)
    if args.max_batch not in raw_rates:
        raise SystemExit(
            f"the raw throughput at --max-batch {args.max_batch} is needed (the share's yardstick)"
        )
    reference = raw_rates[args.max_batch]
    costs = {
        "server": BatchCost.from_throughput(service_rates),
        "raw pipeline": BatchCost.from_throughput(raw_rates),
    }
    report: dict[str, object] = {"raw_img_per_s": raw_rates, "server_img_per_s": service_rates, "costs": {}}
    print(f"raw pipeline at batch {args.max_batch}: {reference:.1f} img/s; p99 bound {args.bound_ms:g} ms")
    ceilings = {}
    for name, cost in costs.items():
        ceiling = ceilings[name] = highest_rate(cost, args.bound_ms, args.max_batch, args.requests)
        predicted = [simulate(rate, cost, args.max_batch, args.requests) for rate in args.rates]
        print(
            f"{name:>12}: batch of n = {cost.fixed_ms:.2f} + {cost.per_request_ms:.2f} n ms; "
            f"highest rate with p99 <= {args.bound_ms:g} ms: {ceiling:.1f} req/s "
            f"({ceiling / reference:.3f} of raw)"
        )
        for p in predicted:
            print(
                f"{'':>14}at {p.rate:6.1f} req/s: p50 {p.p50_ms:6.1f}  p90 {p.p90_ms:6.1f}  "
                f"p99 {p.p99_ms:6.1f} ms, mean batch {p.mean_batch:.2f}"
            )
        report["costs"][name] = {  # type: ignore[index]
            **asdict(cost),
            "ceiling_req_per_s": ceiling,
            "ceiling_share_of_raw": ceiling / reference,
            "predicted": [asdict(p) for p in predicted],
        }
    target = args.goal_share * reference
    if ceilings["raw pipeline"] < target:
        budget = None
        print(
            f"even a server that costs nothing beyond the raw pipeline stays below {args.goal_share:g} of raw"
        )
    else:
        budget = overhead_budget(costs["raw pipeline"], costs["server"], target, args)
        print(
            f"a ceiling of {args.goal_share:g} of raw ({target:.1f} req/s) leaves room for {budget:.0%} "
            "of the cost the server adds to the raw pipeline"
        )
    report["goal_share"], report["overhead_share_allowed"] = args.goal_share, budget
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The batching policies in the queueing model, on batch times measured per size: the server scenario's p99
per load and the highest rate within a bound, for each policy (`bench.model.queue_model`).

    .venv/bin/python scripts/bench/batch_policy_model.py --batch-ms 1=8.39 2=17.63 8=55.12 \\
        [--overhead-ms 0] [--fractions 0.1 0.3 0.5 0.7 0.9] [--bound-ms 100] [--json FILE]
    .venv/bin/python scripts/bench/batch_policy_model.py --measure REPO --images IMG [--sizes 1 2 4 8]

``--batch-ms N=MS``: a batch of N keeps the worker MS milliseconds (sizes between interpolated), e.g. from
`detect-bench backend` through the service's backend (a batch of one on its static graph, the others on
the dynamic one); ``--measure REPO --images IMG``: the raw pipeline (decode to JSON in one thread) of the
one-model repository timed here at each of ``--sizes``. ``--overhead-ms`` adds a server's own cost per
request. Rates are ``--fractions`` of the capacity at the largest batch. Policies: ``fixed`` takes every
waiting request (up to ``--max-batch``), ``adaptive`` the share `batch_close.dispatch_size` picks, ``none``
one at a time.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path

from server_scenario_model import measured_raw, throughputs

from bench.model.queue_model import DISPATCH, SizeCosts, adaptive_dispatch, highest_rate, simulate


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch-ms", nargs="+", metavar="N=MS")
    parser.add_argument(
        "--measure", metavar="REPO", help="time the raw pipeline of this one-model repository"
    )
    parser.add_argument("--images", nargs="+", help="with --measure")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8], help="with --measure")
    parser.add_argument("--overhead-ms", type=float, default=0.0, help="added per request")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9])
    parser.add_argument(
        "--policies", nargs="+", choices=sorted(DISPATCH), default=["fixed", "adaptive", "none"]
    )
    parser.add_argument("--bound-ms", type=float, default=100.0)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument(
        "--longest-ms",
        type=float,
        nargs="+",
        default=[math.inf],
        help="adaptive: the longest batch it runs while shorter ones keep up (several: one row each)",
    )
    parser.add_argument("--requests", type=int, default=50_000, help="simulated requests per rate")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if (args.batch_ms is None) == (args.measure is None):
        raise SystemExit("give --batch-ms or --measure (with --images)")
    if args.measure and not args.images:
        raise SystemExit("--measure needs --images")
    if args.batch_ms:
        base = throughputs(args.batch_ms, value="MS", example="8=55.1")
    else:
        rates = measured_raw(args.measure, args.images, args.sizes)
        base = {n: 1000.0 * n / rate for n, rate in rates.items()}
    cost = SizeCosts({n: ms + args.overhead_ms * n for n, ms in base.items()})
    capacity = 1000.0 * args.max_batch / cost.ms(args.max_batch)
    print(
        "batch ms: " + ", ".join(f"{n}={cost.ms(n):.2f}" for n in range(1, args.max_batch + 1))
        + f"; capacity at batch {args.max_batch}: {capacity:.1f} req/s"
    )  # fmt: skip
    report: dict[str, object] = {"batch_ms": base, "overhead_ms": args.overhead_ms, "capacity": capacity}
    policies: dict[str, object] = {}
    rows = [
        (f"{name} <= {longest:g} ms" if math.isfinite(longest) else name, name, longest)
        for name in args.policies
        for longest in (args.longest_ms if name == "adaptive" else [math.inf])
    ]
    for label, name, longest in rows:
        if name == "adaptive":
            dispatch = adaptive_dispatch(cost, args.max_batch, longest_ms=longest)
        else:
            dispatch = DISPATCH[name](cost, args.max_batch)
        ceiling = highest_rate(cost, args.bound_ms, args.max_batch, args.requests, dispatch=dispatch)
        runs = [
            simulate(f * capacity, cost, args.max_batch, args.requests, dispatch=dispatch)
            for f in args.fractions
        ]
        cells = "  ".join(
            f"{f:.1f}: {p.p99_ms:7.1f} ({p.mean_batch:.2f})"
            for f, p in zip(args.fractions, runs, strict=True)
        )
        print(f"{label:>9}  p99 ms (mean batch) by share of capacity  {cells}")
        print(
            f"{'':>9}  highest rate with p99 <= {args.bound_ms:g} ms: {ceiling:.1f} req/s"
            f" ({ceiling / capacity:.3f} of capacity)"
        )
        policies[label] = {
            "ceiling": ceiling,
            "ceiling_share": ceiling / capacity,
            "runs": [asdict(p) for p in runs],
        }
    report["policies"] = policies
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

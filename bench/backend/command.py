"""``detect-bench backend``'s arguments. The benchmark itself (`bench.backend.artifact`: numpy, the
manifest, the runtimes) is imported only to run it, so ``--help`` answers without loading any of that.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--artifact", help="artifact folder (models/<name>/<version>)")
    target.add_argument(
        "--models",
        nargs="+",
        help="model and/or artifact folders: every artifact on every CPU runtime and precision, side by "
        "side, through the service's backends (bench.backend.runtimes)",
    )
    parser.add_argument(
        "--data", help="with --models: COCO-format folder; AP of each variant on its val split"
    )
    parser.add_argument("--max-images", type=int, help="with --data: evaluate on at most this many images")
    parser.add_argument("--rounds", type=int, default=5, help="with --models: interleaved timing rounds")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--iterations", type=int, default=20, help="timed calls per batch size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per batch size first")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: one per core)")
    parser.add_argument("--eager-checkpoint", help="also time PyTorch eager from this checkpoint")
    parser.add_argument("--breakdown", action="store_true", help="time network and post-processing apart")
    parser.add_argument("--json", help="write the full report here")
    parser.add_argument("--csv", help="write the rows here")
    parser.add_argument("--plot", help="write a throughput/latency plot (PNG) here")


def run(args: argparse.Namespace) -> int:
    from bench.backend.artifact import run as run_backend

    return run_backend(args)

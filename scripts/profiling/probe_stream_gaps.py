"""How busy each inference thread of a served model is under load, and the gaps between its batches.

    .venv/bin/python scripts/profiling/probe_stream_gaps.py --model-repository REPO_WITH_ONE_MODEL \
        [--images service/static/samples/shapes-1.jpg] [--concurrency 16] [--seconds 12] [--env K=V ...]

It starts ``detect-serve`` in a child process whose batch workers time every batch on their own thread
(start and end of ``run_batch``), drives it with wrk in a closed loop (a 3 s warm-up, then ``--seconds``),
stops it and prints, per inference thread over the measured window: batches, mean batch size, the share of
the time it ran a batch, the gap between one batch's end and the next one's start (median, mean, p90) and
the median batch time. A gap is time a stream sat idle while requests waited (at concurrency 16 there are
always some): the round trip through the event loop between two batches (docs/batching.md, "On deck").
``--env DETECT_BATCH_ON_DECK=false`` shows them without the deck.
"""

from __future__ import annotations

import argparse
import atexit
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench.load.wrk_client import run_wrk
from bench.server.local_server import local_server

WARMUP_S = 3.0


def _serve(log_path: str, argv: list[str]) -> int:
    """In the child: ``detect-serve`` with every batch worker's batches timed on its own thread."""
    from service.cli import main
    from service.runtime.batching import batch_worker

    batches: list[tuple[str, float, float, int]] = []
    original = batch_worker.BatchWorker.__init__

    def timed_init(
        self: Any, name: str, run_batch: Callable[[list[Any]], Sequence[Any]], *a: Any, **k: Any
    ) -> None:
        def timed(items: list[Any]) -> Sequence[Any]:
            started = time.monotonic()
            try:
                return run_batch(items)
            finally:
                batches.append((threading.current_thread().name, started, time.monotonic(), len(items)))

        original(self, name, timed, *a, **k)

    batch_worker.BatchWorker.__init__ = timed_init  # type: ignore[method-assign]
    # Written as the server exits: local_server's SIGTERM drains detect-serve, which then returns.
    atexit.register(lambda: Path(log_path).write_text(json.dumps(batches)))
    return main(argv)


def summarize(batches: list[tuple[str, float, float, int]], start: float, end: float) -> list[dict[str, Any]]:
    """Per thread, over the batches wholly inside ``[start, end]``: busy share, gaps and batch times."""
    by_thread: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for thread, began, ended, size in batches:
        if began >= start and ended <= end:
            by_thread[thread].append((began, ended, size))
    rows = []
    for thread, runs in sorted(by_thread.items()):
        runs.sort()
        if len(runs) < 3:
            continue
        gaps = sorted(b[0] - a[1] for a, b in pairwise(runs))
        span = runs[-1][1] - runs[0][0]
        rows.append(
            {
                "thread": thread,
                "batches": len(runs),
                "mean_size": statistics.mean(size for *_, size in runs),
                "busy": sum(e - b for b, e, _ in runs) / span,
                "gap_median_ms": statistics.median(gaps) * 1e3,
                "gap_mean_ms": statistics.mean(gaps) * 1e3,
                "gap_p90_ms": gaps[int(0.9 * (len(gaps) - 1))] * 1e3,
                "batch_median_ms": statistics.median(e - b for b, e, _ in runs) * 1e3,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-repository", required=True)
    parser.add_argument("--images", default="service/static/samples/shapes-1.jpg")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--env", nargs="*", default=[], help="K=V settings for the server")
    args = parser.parse_args(argv)
    env = {"DETECT_LOG_LEVEL": "warning", **dict(item.split("=", 1) for item in args.env)}
    image = Path(args.images).read_bytes()
    with tempfile.TemporaryDirectory(prefix="stream-gaps-") as folder:
        log = Path(folder) / "batches.json"
        wrapper = (sys.executable, __file__, "--serve", str(log))
        with local_server(Path(args.model_repository), env, program=wrapper) as server:
            run_wrk(server.url, image, "image/jpeg", concurrency=args.concurrency, duration_s=WARMUP_S)
            start = time.monotonic()
            result = run_wrk(
                server.url, image, "image/jpeg", concurrency=args.concurrency, duration_s=args.seconds
            )
            end = time.monotonic()
        batches = json.loads(log.read_text())
    print(f"{result.ok / result.duration_s:.1f} req/s, p50 {result.latency_ms['p50']:.1f} ms")
    for row in summarize(batches, start, end):
        print(
            f"{row['thread']}: batches {row['batches']}, mean size {row['mean_size']:.2f}, "
            f"busy {row['busy']:.3f}, gap median {row['gap_median_ms']:.2f} / mean {row['gap_mean_ms']:.2f} "
            f"/ p90 {row['gap_p90_ms']:.2f} ms, batch median {row['batch_median_ms']:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        sys.exit(_serve(sys.argv[2], sys.argv[3:]))
    sys.exit(main())

"""OpenVINO's CPU plugin with a dynamic batch dimension against static-shape graphs, the runtime alone.

    .venv/bin/python scripts/profiling/probe_openvino_shapes.py models/efficientdet-d0-synth-int8/1 \\
        [--threads 2] [--rounds 5] [--calls 20] [--sizes 1,2,8]

One dynamic graph (what the artifact is) and one static graph per ``--sizes`` entry are compiled as the
service compiles them (one stream, ``--threads`` threads, f32 hint); then, in interleaved rounds, each
pattern is timed per call (median and p90 over the rounds, ms):

- a batch of N repeated on the dynamic graph, and on N's static graph;
- a batch of N right after a batch of another size (the next size in ``--sizes``) on the same dynamic
  graph, against the same two sizes each on its own static graph.

It also prints the resident memory after each compile and after the first run of each size, and checks
that both graphs give the same outputs. docs/cpu-inference.md, "Static batch shapes", has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.runtime.backends.machine import openvino_core
from service.runtime.backends.openvino_backend import read_with_batch_size


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 1e6


def compile_graph(core: Any, path: Path, size: int | None, threads: int) -> Any:
    config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": threads}
    config["INFERENCE_PRECISION_HINT"] = "f32"
    if size is None:
        return core.compile_model(str(path), "CPU", config)
    return core.compile_model(read_with_batch_size(core, path, size), "CPU", config)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("artifact", type=Path, help="a version folder holding model.onnx")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--sizes", default="1,2,8")
    args = parser.parse_args()
    path = args.artifact / "model.onnx"
    sizes = [int(s) for s in args.sizes.split(",")]
    core = openvino_core()
    print(f"resident memory at start: {rss_mb():.0f} MB")
    dynamic = compile_graph(core, path, None, args.threads)
    print(f"dynamic graph compiled: {rss_mb():.0f} MB")
    static = {}
    for size in sizes:
        static[size] = compile_graph(core, path, size, args.threads)
        print(f"static batch-{size} graph compiled: {rss_mb():.0f} MB")
    shape = [d.get_length() if d.is_static else 1 for d in dynamic.input(0).get_partial_shape()]
    rng = np.random.default_rng(0)
    batches = {size: rng.integers(0, 256, size=[size, *shape[1:]], dtype=np.uint8) for size in sizes}
    dyn = dynamic.create_infer_request()
    fixed = {size: graph.create_infer_request() for size, graph in static.items()}
    for size in sizes:
        a, b = dyn.infer([batches[size]]), fixed[size].infer([batches[size]])
        same = all(
            np.array_equal(a[p], b[q]) for p, q in zip(dynamic.outputs, static[size].outputs, strict=True)
        )
        print(f"batch {size} run on both: {rss_mb():.0f} MB; outputs equal: {same}")

    times: dict[str, list[float]] = {}

    def timed(label: str, request: Any, size: int) -> None:
        started = time.perf_counter()
        request.infer([batches[size]])
        times.setdefault(label, []).append((time.perf_counter() - started) * 1000)

    for _ in range(args.rounds):
        for i, size in enumerate(sizes):
            other = sizes[(i + 1) % len(sizes)]
            for _ in range(args.calls):
                timed(f"batch {size} repeated, dynamic", dyn, size)
            for _ in range(args.calls):
                timed(f"batch {size} repeated, static", fixed[size], size)
            for _ in range(args.calls):
                dyn.infer([batches[other]])
                timed(f"batch {size} after batch {other}, dynamic", dyn, size)
            for _ in range(args.calls):
                fixed[other].infer([batches[other]])
                timed(f"batch {size} after batch {other}, static graphs", fixed[size], size)
    for label, values in times.items():
        values.sort()
        p90 = values[int(len(values) * 0.9)]
        print(f"{label:42s} median {statistics.median(values):7.2f} ms  p90 {p90:7.2f} ms")


if __name__ == "__main__":
    main()

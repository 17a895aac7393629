"""OpenVINO streams on this CPU, the runtime alone: one stream on every thread against N streams of fewer
threads each, at batch 1 and 8, with as many callers as streams (each its own infer request, in its own
thread) and with one caller alone (a lone request's latency).

    .venv/bin/python scripts/profiling/probe_openvino_streams.py models/efficientdet-d0-synth-int8/1 \
        [--streams 2] \
        [--rounds 2] [--seconds 4] [--solo]

Prints img/s per configuration and round, interleaved, on random uint8 inputs of the manifest's size.
With ``--memory``, instead: the process's RSS after compiling, after a warmup at batch 1 and 8 on every
infer request, and after three passes of every batch size 1-8 at random (60 calls per request per pass),
for one stream or ``--streams`` (run once per setting: each in its own process).
With ``--solo``, instead: the solo graph (`DETECT_OPENVINO_SOLO_GRAPH`: one stream on every thread, beside
the streams) against one image on a stream, alone (back to back, and 20 ms apart as sparse arrivals leave
them), right after a burst on the streams, and while a stream runs another image (median ms per image).
What `DETECT_OPENVINO_STREAMS` does in the service is measured end to end by
`scripts/bench/bench_server_scenario.py` (docs/cpu-inference.md, "Inference streams").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov


def compile_model(
    core: ov.Core, path: Path, size: tuple[int, int], streams: int, threads: int
) -> ov.CompiledModel:
    model = core.read_model(str(path))
    model.reshape({model.inputs[0].any_name: [-1, size[0], size[1], 3]})
    config = {
        "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY" if streams == 1 else "THROUGHPUT",
        "NUM_STREAMS": streams,
        "INFERENCE_NUM_THREADS": threads,
    }
    return core.compile_model(model, "CPU", config)


def images_per_s(compiled: ov.CompiledModel, callers: int, batch: int, seconds: float) -> float:
    """``callers`` threads, each with its own infer request, calling back to back for ``seconds``."""
    rng = np.random.default_rng(0)
    shape = tuple(compiled.inputs[0].get_partial_shape().get_min_shape())[1:]
    x = rng.integers(0, 256, (batch, *shape), dtype=np.uint8)
    requests = [compiled.create_infer_request() for _ in range(callers)]
    for request in requests:
        request.infer({0: x})
    counts = [0] * callers
    stop = time.perf_counter() + seconds

    def call(index: int) -> None:
        while time.perf_counter() < stop:
            requests[index].infer({0: x})
            counts[index] += batch

    threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_growth(compiled: ov.CompiledModel, streams: int, shape: tuple[int, int]) -> None:
    """RSS as each infer request meets batch sizes it has not run yet (printed, MB)."""
    print(f"compiled: {rss_mb():.0f} MB", flush=True)
    requests = [compiled.create_infer_request() for _ in range(streams)]
    for request in requests:
        for batch in (1, 8):
            request.infer({0: np.zeros((batch, *shape, 3), np.uint8)})
    print(f"after warmup at batch 1 and 8: {rss_mb():.0f} MB", flush=True)
    for index in range(3):

        def calls(request: ov.InferRequest, seed: int) -> None:
            sizes = np.random.default_rng(seed).integers(1, 9, 60)
            for batch in sizes:
                request.infer({0: np.zeros((int(batch), *shape, 3), np.uint8)})

        threads = [threading.Thread(target=calls, args=(r, i + 10 * index)) for i, r in enumerate(requests)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(f"after pass {index} of random batch sizes 1-8: {rss_mb():.0f} MB", flush=True)


def median_ms(call: Callable[[], object], times: int, gap_s: float = 0.0) -> float:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        taken.append((time.perf_counter() - started) * 1e3)
        time.sleep(gap_s)
    return statistics.median(taken)


def solo_against_streams(
    core: ov.Core, graph: Path, size: tuple[int, int], streams: int, threads: int
) -> None:
    """One round of the ``--solo`` figures (printed)."""
    pool = compile_model(core, graph, size, streams, threads)
    solo = compile_model(core, graph, size, 1, threads)
    x = {0: np.random.default_rng(0).integers(0, 256, (1, *size, 3), dtype=np.uint8)}
    solo_request, *stream_requests = [solo.create_infer_request()] + [
        pool.create_infer_request() for _ in range(streams)
    ]
    for request in [solo_request, *stream_requests]:
        for _ in range(5):
            request.infer(x)

    def after_burst() -> None:
        burst = [threading.Thread(target=lambda r=r: [r.infer(x) for _ in range(3)]) for r in stream_requests]
        for thread in burst:
            thread.start()
        for thread in burst:
            thread.join()

    beside: list[float] = []

    def overlapped() -> None:
        other = threading.Thread(target=lambda: stream_requests[0].infer(x))
        other.start()
        beside.append(median_ms(lambda: solo_request.infer(x), 1))
        other.join()

    figures = {
        "solo, back to back": median_ms(lambda: solo_request.infer(x), 200),
        "stream, back to back": median_ms(lambda: stream_requests[0].infer(x), 200),
        "solo, 20 ms apart": median_ms(lambda: solo_request.infer(x), 100, 0.02),
        "stream, 20 ms apart": median_ms(lambda: stream_requests[0].infer(x), 100, 0.02),
    }
    solo_after = []
    for _ in range(50):
        after_burst()
        solo_after.append(median_ms(lambda: solo_request.infer(x), 1))
    figures["solo, right after a burst on the streams"] = statistics.median(solo_after)
    for _ in range(50):
        overlapped()
    figures["solo, beside a stream's image"] = statistics.median(beside)
    shown = {key: round(value, 1) for key, value in figures.items()}
    print(f"ms per image {shown}  load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("artifact", type=Path, help="a model version folder (manifest.json + its file)")
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="threads in all")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--memory", choices=("one", "streams"), help="RSS growth of one setting instead")
    parser.add_argument("--solo", action="store_true", help="the solo graph against a stream instead")
    args = parser.parse_args()
    manifest = json.loads((args.artifact / "manifest.json").read_text())
    size = (manifest["input"]["height"], manifest["input"]["width"])
    core = ov.Core()
    if args.solo:
        for _ in range(args.rounds):
            solo_against_streams(core, args.artifact / manifest["file"], size, args.streams, args.threads)
        return
    if args.memory:
        streams = 1 if args.memory == "one" else args.streams
        graph = args.artifact / manifest["file"]
        memory_growth(compile_model(core, graph, size, streams, args.threads), streams, size)
        return
    graph = args.artifact / manifest["file"]
    configs = {
        f"1 stream x {args.threads} threads": (1, compile_model(core, graph, size, 1, args.threads)),
        f"{args.streams} streams, {args.threads} threads in all": (
            args.streams,
            compile_model(core, graph, size, args.streams, args.threads),
        ),
    }
    for index in range(args.rounds):
        for name, (streams, compiled) in configs.items():
            figures = {
                f"bs{batch} x {streams} callers": images_per_s(compiled, streams, batch, args.seconds)
                for batch in (1, 8)
            }
            figures["bs1, one caller"] = images_per_s(compiled, 1, 1, args.seconds)
            shown = {key: round(value, 1) for key, value in figures.items()}
            print(f"round {index}  {name:32s} img/s {shown}  load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()

"""Where an artifact's time goes in OpenVINO: per-operation time from the CPU plugin's performance counters,
summed by operation type and kernel, on random images at the network's size.

    .venv/bin/python scripts/profiling/openvino_profile.py ARTIFACT_DIR [--batch-size 1] [--threads 2] \\
        [--calls 50] \\
        [--precision f32|bf16] [--top 15] [--static]

The model is compiled as the service's OpenVINO backend compiles it for that precision (INT8 artifacts run
their quantized layers in INT8 whatever the precision hint says); the wall time per call is printed first,
then the top kernels by time (``Convolution:brgconv_avx512_1x1_i8`` is an INT8 1x1 convolution, a ``ref``
kernel is OpenVINO's slow reference implementation). ``--static`` compiles the graph with its batch
dimension fixed at ``--batch-size``, as the backend's static-shape graphs
(``DETECT_OPENVINO_STATIC_BATCH_SIZES``).
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import numpy as np

from contract.manifest import Manifest
from service.runtime.backends.machine import openvino_core
from service.runtime.backends.openvino_backend import read_with_batch_size


def profile(
    artifact: Path, batch_size: int, threads: int, calls: int, precision: str, static: bool = False
) -> tuple[float, collections.Counter[str]]:
    """(milliseconds per call, {"Type:kernel": milliseconds summed over one call})."""
    manifest = Manifest.read(artifact)
    config = {"PERF_COUNT": True, "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision}
    core = openvino_core()
    path = artifact / manifest.file
    model = read_with_batch_size(core, path, batch_size) if static else str(path)
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    shape = (batch_size, manifest.input.height, manifest.input.width, 3)
    images = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
    for _ in range(max(calls // 5, 2)):
        request.infer({0: images})
    start = time.perf_counter()
    for _ in range(calls):
        request.infer({0: images})
    per_call_ms = (time.perf_counter() - start) / calls * 1e3
    kernels: collections.Counter[str] = collections.Counter()
    for node in request.profiling_info:  # the last call's counters
        kernels[f"{node.node_type}:{node.exec_type}"] += node.real_time.total_seconds() * 1e3
    return per_call_ms, kernels


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("artifact", type=Path, help="a version folder (ONNX or OpenVINO IR)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--static", action="store_true", help="batch dimension fixed at --batch-size")
    args = parser.parse_args()
    per_call_ms, kernels = profile(
        args.artifact, args.batch_size, args.threads, args.calls, args.precision, args.static
    )
    total = sum(kernels.values())
    print(f"{args.artifact}: {per_call_ms:.2f} ms per call at batch {args.batch_size}", end=", ")
    print(f"{total:.2f} ms in operations")
    for kernel, ms in kernels.most_common(args.top):
        print(f"{ms:8.3f} ms {100 * ms / total:5.1f}%  {kernel}")


if __name__ == "__main__":
    main()

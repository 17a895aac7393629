"""Load time and img/s of an INT8 model as QDQ ONNX and as OpenVINO IR, in OpenVINO and ONNX Runtime.

    .venv/bin/python scripts/export/bench_int8_formats.py --fp32 models/ssd300-synth/1/model.onnx \
        --int8 models/ssd300-synth-int8/1/model.onnx [--iterations 20] [--threads 2]

The IR is the QDQ ONNX converted by OpenVINO (``ov.convert_model`` + ``ov.save_model``, weights compressed
to INT8 as the CPU plugin runs them), so both formats hold the same quantized network. Load time is
read + compile in a fresh ``ov.Core`` (no compile cache), median of 3. Throughput: random uint8 images,
``--iterations`` timed calls after 2 warm-up calls, at batch 1 and 8.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import openvino as ov


def _throughput(run: Callable[[np.ndarray], object], shape: tuple[int, ...], iterations: int) -> float:
    images = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
    for _ in range(2):
        run(images)
    start = time.perf_counter()
    for _ in range(iterations):
        run(images)
    return iterations * shape[0] / (time.perf_counter() - start)


def _ov_load(path: Path, threads: int, hint: str = "f32") -> tuple[float, ov.CompiledModel]:
    times, compiled = [], None
    for _ in range(3):
        core = ov.Core()
        start = time.perf_counter()
        compiled = core.compile_model(
            core.read_model(str(path)),
            "CPU",
            {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": hint},
        )
        times.append(time.perf_counter() - start)
    assert compiled is not None
    return statistics.median(times), compiled


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fp32", required=True, type=Path)
    parser.add_argument("--int8", required=True, type=Path)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", type=int, default=300)
    args = parser.parse_args()
    shape = (args.size, args.size, 3)
    with tempfile.TemporaryDirectory() as tmp:
        ir = Path(tmp) / "model.xml"
        ov.save_model(ov.convert_model(str(args.int8)), str(ir))
        rows = []
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        for name, path in (("ORT fp32 ONNX", args.fp32), ("ORT int8 QDQ ONNX", args.int8)):
            start = time.perf_counter()
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            load = time.perf_counter() - start
            input_name = session.get_inputs()[0].name

            def run(x: np.ndarray, s: ort.InferenceSession = session, n: str = input_name) -> object:
                return s.run(None, {n: x})

            rows.append((name, load, [_throughput(run, (b, *shape), args.iterations) for b in (1, 8)]))
        for name, path, hint in (
            ("OpenVINO fp32 ONNX", args.fp32, "f32"),
            ("OpenVINO bf16 ONNX", args.fp32, "bf16"),
            ("OpenVINO int8 QDQ ONNX", args.int8, "f32"),
            ("OpenVINO int8 IR", ir, "f32"),
        ):
            load, compiled = _ov_load(path, args.threads, hint)
            request = compiled.create_infer_request()

            def run_ov(x: np.ndarray, r: ov.InferRequest = request) -> object:
                return r.infer({0: x})

            rows.append((name, load, [_throughput(run_ov, (b, *shape), args.iterations) for b in (1, 8)]))
    print("| runtime / format | load s | img/s bs 1 | img/s bs 8 |")
    print("|---|---|---|---|")
    for name, load, (bs1, bs8) in rows:
        print(f"| {name} | {load:.2f} | {bs1:.1f} | {bs8:.1f} |")


if __name__ == "__main__":
    main()

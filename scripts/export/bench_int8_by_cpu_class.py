"""INT8 speed per CPU class: each INT8 artifact in OpenVINO against its fp32 model in ONNX Runtime, under
every x86 class this machine reaches (`contract.cpu_classes`), each class in a fresh process capped by
``ONEDNN_MAX_CPU_ISA``.

    .venv/bin/python scripts/export/bench_int8_by_cpu_class.py --out runs/bench-int8-classes.json \
        --pair models/ssd300-synth-int8/1:models/ssd300-synth/1 --pair models/ssd320-synth-int8/1 \
        [--rounds 5 --batch-sizes 1,8]

A pair is ``INT8_DIR[:FP32_DIR]``; without an fp32 artifact the reference is the INT8 graph with its
quantizers taken out (weights dequantized to float32, activation Q/DQ pairs bypassed): the parent's
architecture and arithmetic, for timing only. Both run through the service's backends
(`service.served.load_backend`), 2 threads, on the same synthetic images, timed in interleaved rounds;
img/s is batch / median latency. Results are kept per class in ``--out``, so a stopped run resumes with
the classes it has not measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from contract.cpu_classes import ISA_ENV, class_cap, cpu_flags, reachable_classes
from contract.manifest import Manifest

PREFIX = "BENCH-RESULT "


def dequantized(int8_dir: Path, out_dir: Path) -> Path:
    """The INT8 graph of ``int8_dir`` as float32 (module docstring), written as an fp32 artifact."""
    import onnx
    from onnx import numpy_helper

    manifest = Manifest.read(int8_dir)
    model = onnx.load(str(int8_dir / manifest.file))
    inits = {init.name: init for init in model.graph.initializer}
    replace: dict[str, str] = {}  # tensor -> the float tensor it stands for
    kept = []
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:  # a weight: dequantize it now
            value = numpy_helper.to_array(inits[node.input[0]]).astype(np.float32)
            scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
            zero = (
                numpy_helper.to_array(inits[node.input[2]]).astype(np.float32) if len(node.input) > 2 else 0
            )
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            shape = [1] * value.ndim
            if scale.ndim == 1:
                shape[axis] = -1
            weight = (value - np.reshape(zero, shape)) * np.reshape(scale, shape)
            model.graph.initializer.append(numpy_helper.from_array(weight, node.output[0]))
        elif node.op_type in ("QuantizeLinear", "DequantizeLinear"):  # an activation pair: pass through
            replace[node.output[0]] = replace.get(node.input[0], node.input[0])
        else:
            kept.append(node)
    for node in kept:
        for i, name in enumerate(node.input):
            node.input[i] = replace.get(name, name)
    for output in model.graph.output:
        output.name = replace.get(output.name, output.name)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_dir / manifest.file))
    manifest.model_copy(
        update={"precision": "fp32", "unquantized_precision": None, "self_check": None}
    ).write(out_dir)
    return out_dir


def measure(pairs: list[tuple[Path, Path | None]], batch_sizes: list[int], rounds: int) -> dict[str, object]:
    """This process's class: img/s of each INT8 artifact (OpenVINO) and its reference (ONNX Runtime)."""
    from bench.backend.artifact import time_calls
    from bench.backend.inputs import bench_images
    from service.served import load_backend

    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for int8_dir, fp32_dir in pairs:
            manifest = Manifest.read(int8_dir)
            reference = fp32_dir or dequantized(int8_dir, Path(tmp) / manifest.name)
            runs = {
                "int8": load_backend(int8_dir, "openvino", threads=2),
                "fp32": load_backend(reference, "cpu", threads=2),
            }
            images = bench_images(manifest, max(batch_sizes), seed=0)
            times: dict[str, dict[int, list[float]]] = {k: {b: [] for b in batch_sizes} for k in runs}
            for _ in range(rounds):
                for batch in batch_sizes:
                    for kind, backend in runs.items():
                        call = functools.partial(backend.infer, images[:batch])
                        times[kind][batch] += time_calls(call, iterations=5, warmup=1)
            row = {
                "int8_runtime": runs["int8"].description,
                "reference": str(reference if fp32_dir else "dequantized"),
            }
            for batch in batch_sizes:
                int8 = batch / float(np.median(times["int8"][batch]))
                fp32 = batch / float(np.median(times["fp32"][batch]))
                row[f"bs{batch}"] = {
                    "int8_img_s": round(int8, 2),
                    "fp32_img_s": round(fp32, 2),
                    "x": round(int8 / fp32, 2),
                }
            for backend in runs.values():
                backend.close()
            results[str(int8_dir)] = row
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair", action="append", required=True, help="INT8_DIR[:FP32_DIR]")
    parser.add_argument("--out", type=Path, required=True, help="JSON of results per class (resumed)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    pairs = [(Path(a), Path(b) if b else None) for a, _, b in (p.partition(":") for p in args.pair)]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if args.child:
        print(PREFIX + json.dumps(measure(pairs, batch_sizes, args.rounds)), flush=True)
        return 0
    done: dict[str, object] = json.loads(args.out.read_text()) if args.out.exists() else {}
    for cpu_class in reachable_classes(cpu_flags()):
        if cpu_class in done:
            continue
        env = {**os.environ, ISA_ENV: class_cap(cpu_class)}
        command = [sys.executable, __file__, "--child", "--out", str(args.out), "--rounds", str(args.rounds)]
        command += ["--batch-sizes", args.batch_sizes] + [f"--pair={p}" for p in args.pair]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        lines = [line for line in result.stdout.splitlines() if line.startswith(PREFIX)]
        if result.returncode or not lines:
            print(result.stderr[-2000:], file=sys.stderr)
            return 1
        done[cpu_class] = json.loads(lines[-1][len(PREFIX) :])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(done, indent=2) + "\n")
        for name, row in done[cpu_class].items():  # type: ignore[attr-defined]
            cells = "  ".join(
                f"{k} {v['int8_img_s']} / {v['fp32_img_s']} img/s = {v['x']}x"
                for k, v in row.items()
                if k.startswith("bs")
            )
            print(f"{cpu_class:12s} {name:28s} {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""On a machine with an NVIDIA GPU: FP16 and INT8 TensorRT engines for every shipped model, their AP
against the fp32 ONNX artifact, and their throughput at batch 1, 8 and 64.

    .venv/bin/python scripts/gpu_engines.py --data DATA [--models models] [--workdir runs/gpu-engines]

``DATA`` is the COCO folder the shipped manifests' accuracy names (``detect-train synth --out DATA
--num-train 0 --num-val 200 --seed 0``). For each fp32 ONNX artifact under ``--models`` it runs
``detect-export trt`` (FP16 engine) and, for each INT8 variant whose manifest names it as parent,
``detect-export trt`` on that variant (explicit-precision INT8 engine from its QDQ graph); then COCO AP of
every engine as the service serves it (`exporters.served_eval`, backend ``tensorrt``) next to the fp32
ONNX artifact's (backend ``cpu``), and img/s of the engine alone on random uint8 batches. Without a GPU it
stops at once, exit 4, saying what it checked.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from exporters.served_eval import served_metrics
from exporters.tensorrt_build import TensorRTExportRequest, export_tensorrt
from exporters.tensorrt_engine import gpu_unavailable_reason
from service.manifest import Manifest

BATCHES = (1, 8, 64)


def shipped(models: Path) -> list[tuple[Path, list[Path]]]:
    """(fp32 ONNX artifact, its INT8 variants) for every model in the repository."""
    manifests = {d: Manifest.read(d) for d in sorted(p.parent for p in models.glob("*/*/manifest.json"))}
    parents = [d for d, m in manifests.items() if m.format == "onnx" and m.precision == "fp32"]
    result = []
    for parent in parents:
        pm = manifests[parent]
        variants = [
            d
            for d, m in manifests.items()
            if m.precision == "int8"
            and m.parent is not None
            and (m.parent.name, m.parent.version) == (pm.name, pm.version)
        ]
        result.append((parent, variants))
    return result


def throughput(plan: Path, manifest: Manifest, batch: int, iterations: int) -> float:
    """Images per second of the engine as the service runs it (its TensorRT backend)."""
    from service.backends.tensorrt_backend import TensorRTBackend

    backend = TensorRTBackend(manifest, plan)
    images = np.random.default_rng(0).integers(
        0, 256, size=(batch, manifest.input.height, manifest.input.width, 3), dtype=np.uint8
    )
    try:
        for _ in range(3):
            backend.infer(images)
        start = time.perf_counter()
        for _ in range(iterations):
            backend.infer(images)
        return iterations * batch / (time.perf_counter() - start)
    finally:
        backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", required=True, help="COCO folder of the manifests' accuracy (val split)")
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument("--workdir", type=Path, default=Path("runs/gpu-engines"))
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"gpu_engines: needs an NVIDIA GPU with TensorRT: {reason}", file=sys.stderr)
        return 4
    rows = []
    for parent, variants in shipped(args.models):
        onnx_ap = served_metrics(parent, args.data, backend="cpu")["bbox"]["AP"]
        for source, precision in [(parent, "fp16"), *((v, "int8") for v in variants)]:
            name = Manifest.read(source).name
            output = args.workdir / f"{name}-trt-{precision}" / "1"
            request = TensorRTExportRequest(
                source, output, min_batch=1, opt_batch=8, max_batch=max(BATCHES), force=True
            )
            manifest = export_tensorrt(request)
            engine_ap = served_metrics(output, args.data, backend="tensorrt")["bbox"]["AP"]
            speeds = [throughput(output / manifest.file, manifest, b, args.iterations) for b in BATCHES]
            rows.append((name, precision, onnx_ap, engine_ap, speeds))
    print(
        "| model | engine | AP fp32 ONNX | AP engine | delta | "
        + " | ".join(f"img/s bs {b}" for b in BATCHES)
        + " |"
    )
    print("|---|---|---|---|---|" + "---|" * len(BATCHES))
    for name, precision, onnx_ap, engine_ap, speeds in rows:
        cells = " | ".join(f"{s:.0f}" for s in speeds)
        print(
            f"| {name} | {precision} | {onnx_ap:.4f} | {engine_ap:.4f} | "
            f"{engine_ap - onnx_ap:+.4f} | {cells} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

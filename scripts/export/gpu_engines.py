"""On a machine with an NVIDIA GPU: FP16 and INT8 TensorRT engines for every shipped model, their AP
against the fp32 ONNX artifact, and their throughput at batch 1, 8 and 64.

    .venv/bin/python scripts/export/gpu_engines.py --data DATA [--models models] [--parents runs] \\
        [--workdir runs/gpu-engines]

``DATA`` is the COCO folder the shipped manifests' accuracy names (``detect-train synth --out DATA
--num-train 0 --num-val 200 --seed 0``). Every shipped model is grouped with its fp32 ONNX parent: the
fp32 artifacts under ``--models``, and for an INT8 variant shipped without its parent (SSD320, Mask
R-CNN), the parent that ``make ssd320-model`` / ``make maskrcnn-model`` leave under ``--parents``
(``runs/*/artifact/NAME/VERSION``). For each group it runs ``detect-export trt`` on the parent (FP16
engine) and on each INT8 variant (explicit-precision INT8 engine from its QDQ graph); then COCO AP of
every engine as the service serves it (`exporters.evaluation.served_eval`, backend ``tensorrt``) next to the
fp32
ONNX artifact's (backend ``cpu``), and img/s of the engine alone on random uint8 batches. A variant whose
parent is nowhere still gets its INT8 engine, compared with the parent AP its manifest recorded. Without
a GPU it stops at once, exit 4, saying what it checked.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from contract.manifest import Manifest
from exporters.evaluation.served_eval import served_metrics
from exporters.tensorrt.build import export_tensorrt
from exporters.tensorrt.config import TensorRTExportRequest
from exporters.tensorrt.engine import tensorrt_unavailable_reason

BATCHES = (1, 8, 64)


@dataclass
class Group:
    """One model's fp32 parent (None: not on this machine) and its INT8 variants."""

    parent: Path | None
    variants: list[Path] = field(default_factory=list)
    recorded_parent_ap: float | None = None  # the variants' manifests' parent AP, when the parent is absent


def _artifacts(root: Path, pattern: str) -> dict[Path, Manifest]:
    return {d: Manifest.read(d) for d in sorted(p.parent for p in root.glob(pattern))}


def shipped(models: Path, parents: Path | None = None) -> list[Group]:
    """Every model in the repository ``models``, grouped by fp32 parent (see the module docstring)."""
    manifests = _artifacts(models, "*/*/manifest.json")
    elsewhere = _artifacts(parents, "*/artifact/*/*/manifest.json") if parents is not None else {}
    groups: dict[tuple[str, str], Group] = {}
    for directory, m in manifests.items():
        if m.format == "onnx" and m.precision == "fp32":
            groups.setdefault((m.name, m.version), Group(None)).parent = directory
    for directory, m in manifests.items():
        if m.precision == "int8" and m.parent is not None:
            key = (m.parent.name, m.parent.version)
            group = groups.setdefault(key, Group(None))
            group.variants.append(directory)
            if m.accuracy is not None and m.accuracy.parent_box_ap is not None:
                group.recorded_parent_ap = m.accuracy.parent_box_ap
    for key, group in groups.items():
        if group.parent is None:
            found = [d for d, m in elsewhere.items() if (m.name, m.version) == key and m.precision == "fp32"]
            group.parent = found[0] if found else None
    return list(groups.values())


def throughput(version_dir: Path, manifest: Manifest, batch: int, iterations: int) -> float:
    """Images per second of the engine in ``version_dir`` as the service runs it (its TensorRT backend)."""
    from service.served import load_backend

    backend = load_backend(version_dir, "tensorrt", manifest=manifest)
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
    parser.add_argument(
        "--parents",
        type=Path,
        default=Path("runs"),
        help="fp32 parents not shipped: PARENTS/*/artifact/NAME/VER",
    )
    parser.add_argument("--workdir", type=Path, default=Path("runs/gpu-engines"))
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    reason = tensorrt_unavailable_reason()
    if reason is not None:
        print(f"gpu_engines: needs an NVIDIA GPU with TensorRT: {reason}", file=sys.stderr)
        return 4
    rows = []
    for group in shipped(args.models, args.parents):
        if group.parent is not None:
            onnx_ap = served_metrics(group.parent, args.data, backend="cpu")["bbox"]["AP"]
            sources = [(group.parent, "fp16")]
        else:
            print(f"no fp32 parent of {group.variants[0]} here: INT8 engine only, against its recorded AP")
            onnx_ap = group.recorded_parent_ap if group.recorded_parent_ap is not None else float("nan")
            sources = []
        for source, precision in [*sources, *((v, "int8") for v in group.variants)]:
            name = Manifest.read(source).name
            output = args.workdir / f"{name}-trt-{precision}" / "1"
            request = TensorRTExportRequest(
                source, output, min_batch=1, opt_batch=8, max_batch=max(BATCHES), force=True
            )
            manifest = export_tensorrt(request)
            engine_ap = served_metrics(output, args.data, backend="tensorrt")["bbox"]["AP"]
            speeds = [throughput(output, manifest, b, args.iterations) for b in BATCHES]
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

"""``detect-bench backend --models DIR``: runtimes and precisions side by side, with AP next to img/s.

    detect-bench backend --models models/ssd300-synth --data /data/synth --batch-sizes 1,8 --rounds 5

Every artifact (version folder) of each model folder runs on every CPU runtime that can run it, loaded
through the service's own backend factory (`service.served.load_backend`), so what is measured is what is
served:

==================  ==============================================================
artifact            variants
==================  ==============================================================
fp32 ONNX           ONNX Runtime fp32, OpenVINO f32, OpenVINO bf16
int8 ONNX (QDQ)     ONNX Runtime int8, OpenVINO int8, OpenVINO int8 with the other float precision
int8 OpenVINO IR    OpenVINO int8, OpenVINO int8 with the other float precision
bf16 (ONNX or IR)   OpenVINO bf16
==================  ==============================================================

"OpenVINO int8" runs the layers an INT8 artifact leaves unquantized as its manifest says (f32 unless
``unquantized_precision`` is bf16); the row after it runs them in the other precision ("openvino int8, bf16
rest"), to show what that choice is worth. On a CPU without bf16 units the bf16 variants cannot run: they
are left out and listed as skipped, with the reason.

Timing is interleaved: each round times every variant at every batch size in turn, so a load spike on a
shared machine hits all of them alike; img/s is batch size / median latency over all rounds. Speed-ups
are against the first ONNX Runtime fp32 variant at the same batch size. OpenVINO variants are loaded
twice, into an empty compile cache and then from it, and both load times are reported. With ``--data``
(a COCO-format folder) each variant's COCO AP is measured on its validation split through the same
backend, images resized as the service resizes them.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.backend.inputs import bench_images
from contract.geometry import resize_for_network
from contract.manifest import MANIFEST_FILE, Manifest
from exporters.evaluation.compare import Detections
from service.served import Backend, cpu_has_bf16, load_backend

# (DETECT_BACKEND, DETECT_OPENVINO_PRECISION, label) per artifact (format, precision).
_RUNS: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ("onnx", "fp32"): [
        ("cpu", "manifest", "onnxruntime fp32"),
        ("openvino", "f32", "openvino f32"),
        ("openvino", "bf16", "openvino bf16"),
    ],
    ("onnx", "int8"): [("cpu", "manifest", "onnxruntime int8"), ("openvino", "manifest", "openvino int8")],
    ("openvino", "fp32"): [("openvino", "f32", "openvino f32"), ("openvino", "bf16", "openvino bf16")],
    ("openvino", "int8"): [("openvino", "manifest", "openvino int8")],
    ("onnx", "bf16"): [("openvino", "manifest", "openvino bf16")],
    ("openvino", "bf16"): [("openvino", "manifest", "openvino bf16")],
}


@dataclass
class Variant:
    label: str
    artifact: str
    backend: str
    openvino_precision: str
    description: str = ""
    inference_precision: str = ""
    load_s: float = 0.0
    cached_load_s: float | None = None
    images_per_s: dict[int, float] = field(default_factory=dict)
    latency_ms: dict[int, float] = field(default_factory=dict)
    speedup: dict[int, float] = field(default_factory=dict)
    ap: float | None = None
    mask_ap: float | None = None


def artifact_dirs(paths: list[str]) -> list[Path]:
    """Version folders: each path is one, or a model folder whose version folders are all taken."""
    found: list[Path] = []
    for path in map(Path, paths):
        if (path / MANIFEST_FILE).is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.iterdir() if (p / MANIFEST_FILE).is_file())
        else:
            raise FileNotFoundError(f"no artifact or model folder at {path}")
    if not found:
        raise FileNotFoundError(f"no artifacts (folders with {MANIFEST_FILE}) under {paths}")
    return found


NO_BF16 = "this CPU has no bf16 units"


def plan_variants(artifacts: list[Path], bf16: bool = True) -> tuple[list[Variant], list[str]]:
    """The variants to run, and the labels of those left out (with the reason) because ``bf16`` is False."""
    variants, skipped = [], []
    for artifact in artifacts:
        m = Manifest.read(artifact)
        runs = list(_RUNS.get((m.format, m.precision), []))
        if m.precision == "int8":
            other = "f32" if m.unquantized_precision == "bf16" else "bf16"
            runs.append(("openvino", other, f"openvino int8, {other} rest"))
        for backend, precision, label in runs:
            full_label = f"{label} ({m.name}/{m.version})"
            # bf16 asked for by the setting, or by the artifact itself
            if not bf16 and "bf16" in (precision, m.precision):
                skipped.append(f"{full_label}: {NO_BF16}")
                continue
            variants.append(Variant(full_label, str(artifact), backend, precision))
    return variants, skipped


def load_variants(variants: list[Variant], threads: int, cache_dir: Path) -> list[Backend]:
    """Load every variant; OpenVINO ones into an empty cache first, then again from it (timed)."""
    backends = []
    for i, v in enumerate(variants):
        load = partial(
            load_backend,
            v.artifact,
            v.backend,
            threads=threads,
            openvino_precision=v.openvino_precision,
            openvino_cache_dir=cache_dir / str(i),
        )
        started = time.perf_counter()
        backend = load()
        v.load_s = time.perf_counter() - started
        if v.backend == "openvino":
            backend.close()
            started = time.perf_counter()
            backend = load()
            v.cached_load_s = time.perf_counter() - started
        v.description, v.inference_precision = backend.description, backend.inference_precision
        backends.append(backend)
    return backends


def time_interleaved(
    variants: list[Variant],
    backends: list[Backend],
    images: list[np.ndarray],
    batch_sizes: list[int],
    rounds: int,
    iterations: int,
) -> None:
    """Rounds of ``iterations`` calls per variant per batch size, variants in turn; fills img/s.

    ``images[i]`` are variant i's inputs (models differ in input size). A variant's speedup is against
    the ONNX Runtime fp32 variant of the same checkpoint, when the run has one.
    """
    times: dict[tuple[int, int], list[float]] = {}
    for backend, inputs in zip(backends, images, strict=True):  # first calls allocate and pick kernels
        for batch in batch_sizes:
            backend.infer(inputs[:batch])
    for _ in range(rounds):
        for batch in batch_sizes:
            for i, (backend, inputs) in enumerate(zip(backends, images, strict=True)):
                for _ in range(iterations):
                    started = time.perf_counter()
                    backend.infer(inputs[:batch])
                    times.setdefault((i, batch), []).append(time.perf_counter() - started)
    for i, v in enumerate(variants):
        for batch in batch_sizes:
            median = float(np.median(times[(i, batch)]))
            v.latency_ms[batch] = median * 1000
            v.images_per_s[batch] = batch / median
    checkpoints = [b.manifest.provenance.checkpoint_sha256 for b in backends]
    for i, v in enumerate(variants):
        baseline = next(
            (
                variants[j]
                for j, other in enumerate(variants)
                if other.label.startswith("onnxruntime fp32") and checkpoints[j] == checkpoints[i]
            ),
            None,
        )
        if baseline is not None:
            for batch in batch_sizes:
                v.speedup[batch] = v.images_per_s[batch] / baseline.images_per_s[batch]


def measure_ap(variants: list[Variant], backends: list[Backend], data: str, max_images: int | None) -> None:
    """COCO AP (and mask AP) of each variant on ``data``'s validation split, through its backend."""
    from exporters.evaluation.coco_ap import evaluate_split
    from exporters.evaluation.verify import manifest_to_original
    from training.train import default_split

    split = default_split(data, "val")
    for v, backend in zip(variants, backends, strict=True):
        m = backend.manifest
        metrics = evaluate_split(
            {"v": _detector(backend)},
            root=data,
            split=split,
            categories=[{"id": label.coco_id, "name": label.name} for label in m.labels],
            resize=_service_resize(m),
            batch_size=min(8, backend.max_batch_size),
            max_images=max_images,
            to_original=manifest_to_original(m),
        )["v"].stats
        v.ap = metrics["bbox"]["AP"]
        v.mask_ap = metrics["segm"]["AP"] if "segm" in metrics else None


def _detector(backend: Backend) -> Callable[[np.ndarray], list[Detections]]:
    return lambda images: Detections.from_contract(backend.infer(images))


def _service_resize(manifest: Manifest) -> Callable[[np.ndarray], np.ndarray]:
    """The service's resize (`contract.geometry`), so AP is measured on exactly what is served."""
    return lambda image: resize_for_network(image, manifest.input)[0]


def compare_runtimes(args: argparse.Namespace, batch_sizes: list[int]) -> dict[str, Any]:
    variants, skipped = plan_variants(artifact_dirs(args.models), bf16=cpu_has_bf16())
    if not variants:
        raise ValueError(f"no artifact under {args.models} runs on a CPU runtime")
    too_big = [b for b in batch_sizes for v in variants if b > Manifest.read(v.artifact).max_batch_size]
    if too_big:
        raise ValueError(f"batch sizes {sorted(set(too_big))} exceed an artifact's max batch")
    with tempfile.TemporaryDirectory(prefix="detect-ov-cache-") as cache:
        backends = load_variants(variants, args.threads, Path(cache))
        try:
            images = [bench_images(backend.manifest, max(batch_sizes)) for backend in backends]
            time_interleaved(variants, backends, images, batch_sizes, args.rounds, args.iterations)
            if args.data:
                measure_ap(variants, backends, args.data, args.max_images)
        finally:
            for backend in backends:
                backend.close()
    return {
        "batch_sizes": batch_sizes,
        "rounds": args.rounds,
        "variants": [asdict(v) for v in variants],
        "skipped": skipped,
    }


def format_comparison(report: dict[str, Any]) -> str:
    batches = report["batch_sizes"]
    head = ["variant", "runs as", "AP", "load s (cached)"] + [f"bs {b} img/s (x)" for b in batches]
    rows = [head]
    for v in report["variants"]:
        ap = "-" if v["ap"] is None else f"{v['ap']:.4f}"
        if v["mask_ap"] is not None:
            ap += f" / mask {v['mask_ap']:.4f}"
        load = f"{v['load_s']:.2f}" + (
            f" ({v['cached_load_s']:.2f})" if v["cached_load_s"] is not None else ""
        )
        cells = [
            f"{v['images_per_s'][b]:.1f}" + (f" ({v['speedup'][b]:.2f}x)" if b in v["speedup"] else "")
            for b in batches
        ]
        rows.append([v["label"], v["description"], ap, load, *cells])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"skipped: {label}" for label in report.get("skipped", [])]
    return "\n".join(lines)

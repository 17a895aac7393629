"""``detect-bench backend``: latency and throughput of an exported artifact per batch size.

    detect-bench backend --artifact models/ssd300/1 --batch-sizes 1,2,4,8,16 --iterations 20 --warmup 3
        [--eager-checkpoint CKPT] [--breakdown] [--json out.json --csv out.csv --plot out.png]

Runtimes, all in the same run on the same images: ONNX Runtime on the CPU (``onnxruntime`` directly),
TensorRT when the artifact directory holds an engine and a GPU is present, and with
``--eager-checkpoint`` PyTorch eager (training's preprocessing, network and post-processing with the
artifact's thresholds). Each batch size gets ``warmup`` untimed calls, then ``iterations`` timed
calls; latency is per call (one batch), throughput = batch size / mean latency.

``--breakdown`` times the ONNX graph's two halves separately (network: images -> raw heads;
post-processing: raw heads -> detections) and reports post-processing as a share of the network time.

With ``--eager-checkpoint`` the report also gives the network's GFLOP per image (``bench.backend.flops``:
PyTorch's ``FlopCounterMode`` over one eager forward pass, a multiply-add = 2 FLOPs) and, per row, the
GFLOP/s that throughput amounts to.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.backend.inputs import bench_images
from contract.manifest import Manifest
from exporters.artifact import read_artifact
from exporters.errors import ExportError

COLUMNS = ("runtime", "batch", "img/s", "avg ms", "p90 ms", "p95 ms", "p99 ms")


@dataclass(frozen=True)
class BenchRow:
    runtime: str
    batch: int
    images_per_s: float
    latency_avg_ms: float
    latency_p90_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    iterations: int

    def cells(self) -> tuple[str, ...]:
        return (
            self.runtime,
            str(self.batch),
            f"{self.images_per_s:.2f}",
            f"{self.latency_avg_ms:.2f}",
            f"{self.latency_p90_ms:.2f}",
            f"{self.latency_p95_ms:.2f}",
            f"{self.latency_p99_ms:.2f}",
        )


def time_calls(call: Callable[[], object], iterations: int, warmup: int) -> list[float]:
    """Seconds per call over ``iterations`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iterations):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def _bind(function: Callable[..., object], *args: Any) -> Callable[[], object]:
    """``function`` with ``args`` bound now (a lambda would capture the loop variable, not its value)."""
    return lambda: function(*args)


def summarize(runtime: str, batch: int, times: list[float]) -> BenchRow:
    ms = np.asarray(times) * 1000.0
    return BenchRow(
        runtime=runtime,
        batch=batch,
        images_per_s=batch / (float(ms.mean()) / 1000.0),
        latency_avg_ms=float(ms.mean()),
        latency_p90_ms=float(np.percentile(ms, 90)),
        latency_p95_ms=float(np.percentile(ms, 95)),
        latency_p99_ms=float(np.percentile(ms, 99)),
        iterations=len(times),
    )


def format_table(rows: list[BenchRow]) -> str:
    cells = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _onnx_path(artifact: Path, manifest: Manifest, model_path: Path) -> Path | None:
    if manifest.format == "onnx":
        return model_path
    fp16 = artifact / "model.fp16.onnx"
    return fp16 if fp16.is_file() else None


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort  # the serve extra; onnx (below) is the export extra's

    from exporters.onnx.graph import load_checked
    from exporters.onnx.ort_cpu import cpu_session

    artifact = Path(args.artifact)
    manifest, model_path = read_artifact(artifact)
    batch_sizes = parse_batch_sizes(args.batch_sizes)
    too_big = [b for b in batch_sizes if b > manifest.max_batch_size]
    if too_big:
        raise ExportError(f"batch sizes {too_big} exceed the artifact's max batch {manifest.max_batch_size}")
    images = bench_images(manifest, max(batch_sizes))
    runners: dict[str, Callable[[np.ndarray], object]] = {}
    onnx_path = _onnx_path(artifact, manifest, model_path)
    model = load_checked(onnx_path) if onnx_path is not None else None
    if model is not None:
        session = cpu_session(model, threads=args.threads)

        def run_onnxruntime(batch: np.ndarray) -> object:
            return session.run(list(manifest.outputs), {"images": batch})  # masks too, for mask models

        runners[f"onnxruntime-cpu ({manifest.precision if manifest.format == 'onnx' else 'fp16'})"] = (
            run_onnxruntime
        )
    notes = []
    if manifest.format == "tensorrt":
        from exporters.tensorrt.engine import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason is None:
            from service.served import load_backend

            runners["tensorrt (fp16)"] = load_backend(artifact, "tensorrt", manifest=manifest).infer
        else:
            notes.append(f"TensorRT skipped: {reason}")
    gflops = None
    if args.eager_checkpoint:
        from bench.backend.flops import checkpoint_gflops

        runners["pytorch-eager (fp32)"] = _eager_runner(args.eager_checkpoint, manifest, args.threads)
        gflops = checkpoint_gflops(args.eager_checkpoint)
    rows = []
    for name, run in runners.items():
        for batch in batch_sizes:
            times = time_calls(_bind(run, images[:batch]), args.iterations, args.warmup)
            rows.append(summarize(name, batch, times))
    breakdown = []
    if args.breakdown:
        if model is None:
            notes.append("--breakdown needs an ONNX graph; none in this artifact")
        else:
            breakdown = postprocess_share(
                model, manifest, images, batch_sizes, args.iterations, args.warmup, args.threads
            )
    return {
        "artifact": str(artifact),
        "model": f"{manifest.name}/{manifest.version} ({manifest.architecture}, {manifest.precision})",
        "iterations": args.iterations,
        "warmup": args.warmup,
        "threads": args.threads or os.cpu_count(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "onnxruntime": ort.__version__,
        "rows": [asdict(r) for r in rows],
        "gflops_per_image": gflops,
        "gflops_method": "torch.utils.flop_counter.FlopCounterMode, eager network, batch 1"
        if gflops
        else None,
        "breakdown": breakdown,
        "notes": notes,
    }


def _eager_runner(checkpoint: str, manifest: Manifest, threads: int) -> Callable[[np.ndarray], object]:
    import torch

    from exporters.evaluation.verify import check_same_model, settings_from_manifest
    from exporters.onnx.wrappers import wrapper_for
    from training.weights import load_checkpoint

    if threads:
        torch.set_num_threads(threads)
    ckpt = load_checkpoint(checkpoint)
    wrapper = wrapper_for(ckpt)
    check_same_model(manifest, wrapper)
    settings = settings_from_manifest(manifest, wrapper)
    return lambda batch: wrapper.eager_detections(wrapper.raw_outputs(batch), settings)


def postprocess_share(
    model: Any,
    manifest: Manifest,
    images: np.ndarray,
    batch_sizes: list[int],
    iterations: int,
    warmup: int,
    threads: int,
) -> list[dict[str, Any]]:
    """Time the graph's network half and post-processing half separately in ONNX Runtime.

    Both halves are cut from the artifact graph itself at its raw head tensors, so the numbers are of
    exactly the nodes that run in production. Returns per batch size: network ms, post-processing ms,
    full graph ms, and post-processing / network. (For a two-stage model, Mask R-CNN, the second half
    is proposal selection, RoI heads, NMS and masks: its raw tensors are the FPN and RPN head outputs.)
    """
    from exporters.evaluation.verify import raw_names_from_manifest
    from exporters.onnx.graph import extract
    from exporters.onnx.ort_cpu import cpu_session

    raw = raw_names_from_manifest(manifest)
    network = cpu_session(extract(model, [manifest.input.name], raw), threads)
    outputs = list(manifest.outputs)
    post = cpu_session(extract(model, raw, outputs), threads)
    full = cpu_session(model, threads)
    result = []
    for batch in batch_sizes:
        feed = {manifest.input.name: images[:batch]}
        heads = dict(zip(raw, network.run(raw, feed), strict=True))
        t_net = np.mean(time_calls(_bind(network.run, raw, feed), iterations, warmup))
        t_post = np.mean(time_calls(_bind(post.run, outputs, heads), iterations, warmup))
        t_full = np.mean(time_calls(_bind(full.run, outputs, feed), iterations, warmup))
        result.append(
            {
                "batch": batch,
                "network_ms": float(t_net * 1000),
                "postprocess_ms": float(t_post * 1000),
                "full_ms": float(t_full * 1000),
                "postprocess_share_of_network": float(t_post / t_net),
            }
        )
    return result


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ExportError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise ExportError(f"--batch-sizes must be positive integers, got {text!r}")
    return sizes


def write_outputs(report: dict[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(report["rows"][0]) if report["rows"] else ["runtime"])
            writer.writeheader()
            writer.writerows(report["rows"])
    if args.plot:
        plot(report, args.plot)


def plot(report: dict[str, Any], path: str) -> None:
    """Throughput and p95 latency against batch size, one line per runtime (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tp, ax_lat) = plt.subplots(1, 2, figsize=(10, 4))
    for runtime in sorted({r["runtime"] for r in report["rows"]}):
        rows = [r for r in report["rows"] if r["runtime"] == runtime]
        batches = [r["batch"] for r in rows]
        ax_tp.plot(batches, [r["images_per_s"] for r in rows], marker="o", label=runtime)
        ax_lat.plot(batches, [r["latency_p95_ms"] for r in rows], marker="o", label=runtime)
    ax_tp.set(xlabel="batch size", ylabel="images / s", title="throughput", xscale="log")
    ax_lat.set(xlabel="batch size", ylabel="ms per batch (p95)", title="latency", xscale="log")
    ax_tp.legend()
    fig.suptitle(report["model"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.iterations < 1 or args.warmup < 0:
        print("detect-bench backend: error: --iterations must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    if args.models:
        return run_comparison(args)
    try:
        report = run_bench(args)
    except (ExportError, ValueError, FileNotFoundError) as exc:
        print(f"detect-bench backend: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{report['model']}: {report['iterations']} timed iterations after {report['warmup']} warm-up per "
        f"batch size; {report['threads']} threads; onnxruntime {report['onnxruntime']}; {report['machine']}"
    )
    print(format_table([BenchRow(**row) for row in report["rows"]]))
    if report.get("gflops_per_image"):
        gflops = report["gflops_per_image"]
        rates = ", ".join(
            f"{r['runtime']} b{r['batch']} {r['images_per_s'] * gflops:.0f}" for r in report["rows"]
        )
        print(f"\nnetwork: {gflops:.2f} GFLOP/image ({report['gflops_method']}); achieved GFLOP/s: {rates}")
    if report["breakdown"]:
        print("\npost-processing vs network (ONNX Runtime, halves of the same graph):")
        for b in report["breakdown"]:
            print(
                f"  batch {b['batch']:>3}: network {b['network_ms']:8.2f} ms, post-processing "
                f"{b['postprocess_ms']:6.2f} ms ({100 * b['postprocess_share_of_network']:.1f}% of network), "
                f"full graph {b['full_ms']:8.2f} ms"
            )
    for note in report["notes"]:
        print(f"note: {note}")
    write_outputs(report, args)
    return 0


def run_comparison(args: argparse.Namespace) -> int:
    from bench.backend.runtimes import compare_runtimes, format_comparison
    from service.served import BackendLoadError

    if args.rounds < 1:
        print("detect-bench backend: error: --rounds must be >= 1", file=sys.stderr)
        return 2
    try:
        report = compare_runtimes(args, parse_batch_sizes(args.batch_sizes))
    except (ExportError, ValueError, FileNotFoundError, BackendLoadError) as exc:
        print(f"detect-bench backend: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.rounds} interleaved rounds x {args.iterations} calls per variant and batch size; "
        f"img/s = batch "
        f"/ median latency; threads {args.threads or os.cpu_count()}; {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    print(format_comparison(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0

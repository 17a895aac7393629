"""On a machine with an NVIDIA GPU: every architecture's COCO preset trained with mixed precision, and its
exported graph's PyTorch module timed at batch 1, 8 and 64, on the synthetic dataset.

    python scripts/training/bench_gpu_torch.py [--data runs/gpu-torch/data] [--workdir runs/gpu-torch]
        [--presets ssd300-coco,ssd320-coco,efficientdet-d0-coco,maskrcnn-coco] [--batch-sizes 1,8,64]
        [--workers 12] [--seconds 2] [--out runs/gpu-torch/results.jsonl] [--skip loader,train,infer]
        [--cudnn-benchmark] [--profile runs/gpu-torch/profile.txt]

For each preset (its architecture, input size and batch size; the synthetic dataset's six classes):

- ``loader``: images/s of the preset's training loader alone (``--pipeline``, default ``torch``: JPEG
  decoding and augmentation in ``--workers`` processes), the ceiling it puts on training;
- ``train``: the real trainer (``training.train.main``) on the GPU for one epoch (at most 40 steps), once in
  fp32 and once in fp16 autocast with a grad scaler, then its COCO evaluation of the val split as every
  run ends; images/s is the median of the run log's ``train`` records after the first, which holds
  cuDNN's autotuning and the loader's start;
- ``infer``: ``exporters.onnx.export.DetectionGraph`` (the graph ``detect-export onnx`` writes:
  preprocessing, network, in-graph post-processing, masks) on the GPU in fp32 and in fp16 autocast, the
  network channels-last, per batch size: a pinned uint8 host batch copied in, the detections copied out.

``--cudnn-benchmark`` lets cuDNN time its algorithms per input shape (the trainer leaves it off);
``--profile FILE`` appends PyTorch profiler tables (by self CUDA and self CPU time) of training steps 11-15
of each training run. Results and what they showed: docs/gpu.md.

The networks are untrained (seed 0): their cost does not depend on the weights, but the post-processing's
can (an untrained head passes other candidates to NMS). Rows go to ``--out`` (JSON lines) as they are
measured, so a run cut short keeps what it measured; a failing row records its error and the others go on.
Without a GPU it stops at once, exit 4.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:  # the project's modules load after the GPU check, so a refusal is quick
    from exporters.onnx.export import DetectionGraph
    from training.engine import Trainer

PRESETS = ("ssd300-coco", "ssd320-coco", "efficientdet-d0-coco", "maskrcnn-coco")
MAX_STEPS = 40
PRECISIONS = ("fp32", "fp16")


def _rows_writer(path: Path) -> Callable[[dict[str, Any]], None]:
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    return write


def _guarded(
    write: Callable[[dict[str, Any]], None], row: dict[str, Any], measure: Callable[[], dict]
) -> None:
    """Measure one row; an exception becomes the row's ``error`` and the run goes on."""
    try:
        row.update(measure())
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"
        traceback.print_exc()
    write(row)
    torch.cuda.empty_cache()


def loader_rate(preset: str, data: Path, workers: int, pipeline: str) -> dict[str, Any]:
    """Images/s of the preset's training loader alone, after its first batch."""
    from training.config import make_config
    from training.data.loader import LoaderRequest
    from training.data.synthetic import CATEGORIES
    from training.detectors.registry import get_task

    cfg = make_config(preset)
    model_args = {"num_classes": len(CATEGORIES), "backbone": cfg.backbone, **cfg.model_args}
    task = get_task(cfg.model)(model_args)
    loader = task.train_loader(LoaderRequest(pipeline, str(data), "train", cfg.batch_size, workers, 0, 0, 1))
    batches = iter(loader)
    next(batches)
    start, images = time.perf_counter(), 0
    for _, batch in zip(range(MAX_STEPS - 1), batches, strict=False):
        images += int(batch[0].shape[0])
    return {"images_per_s": images / (time.perf_counter() - start), "batch_size": cfg.batch_size}


@contextlib.contextmanager
def _profiled_steps(report: Path | None, title: str) -> Iterator[None]:
    """With ``report``: PyTorch's profiler over training steps 11-15 of the run inside, its operators by
    self CUDA time and by self CPU time appended to ``report``."""
    if report is None:
        yield
        return
    from torch.profiler import ProfilerActivity, profile, schedule

    from training.engine import Trainer

    original = Trainer.step
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities, schedule=schedule(wait=10, warmup=3, active=5, repeat=1)) as prof:

        def step(self: Trainer, batch: tuple[Any, ...], iteration: int) -> float:
            loss = original(self, batch, iteration)
            prof.step()
            return loss

        Trainer.step = step  # type: ignore[method-assign]  # the profiler steps with the trainer
        try:
            yield
        finally:
            Trainer.step = original  # type: ignore[method-assign]
    averages = prof.key_averages()
    with report.open("a") as f:
        f.write(f"## {title}: training steps 11-15\n")
        for key in ("self_cuda_time_total", "self_cpu_time_total"):
            f.write(averages.table(sort_by=key, row_limit=15) + "\n")


def train_rate(
    preset: str,
    data: Path,
    workdir: Path,
    precision: str,
    workers: int,
    pipeline: str,
    profile_report: Path | None = None,
) -> dict:
    """The real trainer for one epoch (at most ``MAX_STEPS`` steps) on the GPU, then its evaluation."""
    from training.config import make_config
    from training.train import main as train_main

    output = workdir / f"{preset}-{precision}"
    cfg = make_config(
        preset,
        data=str(data),
        output=str(output),
        epochs=1,
        max_iters=MAX_STEPS,
        pipeline=pipeline,
        workers=workers,
        precision=precision,
        device="cuda",
        log_interval=5,
        eval_batch_size=16,
    )
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with _profiled_steps(profile_report, f"{preset} {precision}"):
        metrics = train_main(cfg)
    seconds = time.perf_counter() - start
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    rates = [r["images_per_s"] for r in records if r["event"] == "train"][1:]
    begin = next(r for r in records if r["event"] == "start")
    return {
        "images_per_s": statistics.median(rates) if rates else None,
        "windows": len(rates),
        "batch_size": cfg.batch_size,
        "precision_logged": begin["precision"],
        "device_logged": begin["device"],
        "run_seconds": seconds,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "bbox_AP": metrics.get("bbox", {}).get("AP"),
    }


def _graph(preset: str) -> tuple[DetectionGraph, tuple[int, int]]:
    from exporters.onnx.export import DetectionGraph
    from exporters.onnx.wrappers import wrapper_for
    from training.weights import untrained_checkpoint

    wrapper = wrapper_for(untrained_checkpoint(preset))
    graph = DetectionGraph(wrapper, wrapper.default_settings, raw_outputs=False).eval()
    return graph, wrapper.input_size


def infer_rates(
    preset: str, batch_sizes: list[int], seconds: float, write: Callable[[dict[str, Any]], None]
) -> None:
    """Rows of images/s of the exported graph's module per precision and batch size."""
    graph, (height, width) = _graph(preset)
    graph = graph.cuda().to(memory_format=torch.channels_last)
    for precision in PRECISIONS:
        for batch in batch_sizes:
            row = {"preset": preset, "kind": "infer", "precision": precision, "batch_size": batch}
            _guarded(
                write, row, lambda b=batch, p=precision: _time_graph(graph, b, (height, width), p, seconds)
            )


@torch.inference_mode()
def _time_graph(
    graph: DetectionGraph, batch: int, size: tuple[int, int], precision: str, seconds: float
) -> dict:
    rng = np.random.default_rng(0)
    host = torch.from_numpy(rng.integers(0, 256, (batch, *size, 3), dtype=np.uint8)).pin_memory()

    def once() -> None:
        with torch.autocast("cuda", dtype=torch.float16, enabled=precision == "fp16"):
            outputs = graph(host.cuda(non_blocking=True))
        for output in outputs:
            output.cpu()

    for _ in range(3):  # cuDNN's algorithm choice and the allocator's pools
        once()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times: list[float] = []
    while len(times) < 5 or sum(times) < seconds:
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {
        "images_per_s": batch / median,
        "latency_ms_median": median * 1e3,
        "latency_ms_p90": float(np.percentile(times, 90)) * 1e3,
        "iterations": len(times),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="runs/gpu-torch/data")
    parser.add_argument("--workdir", default="runs/gpu-torch")
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--batch-sizes", default="1,8,64")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--pipeline", default="torch", choices=["torch", "dali"])
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="timed seconds per inference row (≥ 5 runs)"
    )
    parser.add_argument("--out", help="JSON lines of results (default: WORKDIR/results.jsonl)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: loader, train, infer")
    parser.add_argument(
        "--cudnn-benchmark", action="store_true", help="let cuDNN time its algorithms per input shape"
    )
    parser.add_argument("--profile", help="append PyTorch profiler tables of training steps 11-15 here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: torch.cuda.is_available() is False", file=sys.stderr)
        return 4
    workdir, data = Path(args.workdir), Path(args.data)
    write = _rows_writer(Path(args.out or workdir / "results.jsonl"))
    skip = set(filter(None, args.skip.split(",")))
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    profile = Path(args.profile) if args.profile else None
    write({"kind": "machine", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "cudnn_benchmark": args.cudnn_benchmark})  # fmt: skip
    if not (data / "annotations" / "instances_train.json").exists():
        from training.data.synthetic import generate_dataset

        generate_dataset(data, num_train=640, num_val=64, seed=0)
    for preset in args.presets.split(","):
        if "loader" not in skip:
            row = {"preset": preset, "kind": "loader", "pipeline": args.pipeline, "workers": args.workers}
            _guarded(write, row, lambda p=preset: loader_rate(p, data, args.workers, args.pipeline))
        if "train" not in skip:
            for precision in PRECISIONS:
                row = {"preset": preset, "kind": "train", "precision": precision, "pipeline": args.pipeline}
                _guarded(
                    write,
                    row,
                    lambda p=preset, q=precision: train_rate(
                        p, data, workdir, q, args.workers, args.pipeline, profile
                    ),
                )
        if "infer" not in skip:
            infer_rates(preset, [int(b) for b in args.batch_sizes.split(",")], args.seconds, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())

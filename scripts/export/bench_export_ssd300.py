"""Export an SSD300 checkpoint end to end and measure it: the numbers the export issue asks for.

    .venv/bin/python scripts/export/bench_export_ssd300.py --checkpoint runs/ssd300-cpu-small/checkpoint.pt \
        --data data/synth [--workdir runs/export-bench] [--batch-sizes 1,2,4,8] [--iterations 10]

Steps (each one the project's own command, run in a subprocess so its exit code counts):

1. ``detect-export onnx`` (with its default verification on generated images);
2. ``detect-export verify --data``: eager PyTorch vs ONNX Runtime COCO AP on the dataset;
3. ``detect-export fp16-eval --data``: FP16 vs FP32 AP in ONNX Runtime on the CPU;
4. ``detect-export trt``: FP16 ONNX + TensorRT engine (exit 4 without a GPU, after the FP16 ONNX);
5. ``detect-bench backend --breakdown --eager-checkpoint``: latency / throughput per batch size and the
   in-graph post-processing's share of the network time;
6. with ``--worst-case``: the same breakdown for an untrained 80-class ResNet-50 SSD300 (COCO's
   size; random heads put every class above the threshold at thousands of anchors, so the per-class
   top-k is full and NMS sees 80 x 200 candidates per image: the most post-processing can cost).

Without ``--checkpoint`` a ResNet-18 model is trained for ``--train-iters`` iterations first
(``detect-train train``; slow on a CPU). Everything lands in ``--workdir``; ``summary.json`` collects
the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def run(cmd: list[str], ok: tuple[int, ...] = (0,)) -> int:
    print("$ " + " ".join(cmd), flush=True)
    started = time.perf_counter()
    code = subprocess.run(cmd, check=False).returncode
    print(f"  -> exit {code} in {time.perf_counter() - started:.1f} s", flush=True)
    if code not in ok:
        raise SystemExit(f"command failed with exit {code}: {' '.join(cmd)}")
    return code


def module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", name, *args]


def worst_case_checkpoint(path: Path) -> Path:
    import torch

    from training.checkpoint import Checkpoint, save_checkpoint
    from training.data.coco_categories import COCO_2017_CATEGORIES
    from training.detectors.ssd300.model import SSD300

    torch.manual_seed(0)
    model = SSD300(num_classes=80, backbone="resnet50").eval()
    categories = [{"id": cid, "name": name} for cid, name in COCO_2017_CATEGORIES]
    args = {"num_classes": 80, "backbone": "resnet50"}
    return save_checkpoint(Checkpoint("ssd300", args, categories, model.state_dict()), path)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, help="SSD300 checkpoint (default: train a small one)")
    parser.add_argument("--data", type=Path, default=Path("data/synth"), help="COCO-format dataset root")
    parser.add_argument("--split", default="val")
    parser.add_argument("--max-images", type=int, default=100, help="images for the AP comparisons")
    parser.add_argument("--workdir", type=Path, default=Path("runs/export-bench"))
    parser.add_argument("--batch-sizes", default="1,2,4,8")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--train-iters", type=int, default=60)
    parser.add_argument("--worst-case", action=argparse.BooleanOptionalAction, default=True)
    return parser.parse_args()


def prepare(args: argparse.Namespace, work: Path) -> Path:
    """The dataset (generated if missing) and the checkpoint (trained if not given)."""
    if not (args.data / "annotations" / f"instances_{args.split}.json").exists():
        from training.data.synthetic import generate_dataset

        generate_dataset(args.data, num_train=400, num_val=100, seed=0)
    if args.checkpoint is not None:
        return Path(args.checkpoint)
    train = ["train", "--preset", "ssd300-cpu-small", "--data", str(args.data)]
    limits = ["--max-iters", str(args.train_iters), "--epochs", "1"]
    run(module("training.cli", *train, "--output", str(work / "train"), *limits))
    return work / "train" / "checkpoint.pt"


def export_and_check(args: argparse.Namespace, work: Path, checkpoint: Path, artifact: Path) -> None:
    """Steps 1-4: export, verify against eager, FP16 against FP32, TensorRT (exit 4 without a GPU)."""
    export = module("exporters.cli", "onnx", "--checkpoint", str(checkpoint), "--output", str(artifact))
    run([*export, "--force"])
    data = ["--data", str(args.data), "--split", args.split, "--max-images", str(args.max_images)]
    verify = ["verify", "--artifact", str(artifact), "--checkpoint", str(checkpoint), *data]
    run(module("exporters.cli", *verify, "--json", str(work / "verify.json")), ok=(0, 3))
    fp16 = ["fp16-eval", "--artifact", str(artifact), *data, "--json", str(work / "fp16.json")]
    run(module("exporters.cli", *fp16), ok=(0, 3))
    trt = ["trt", "--artifact", str(artifact), "--output", str(work / "models" / "ssd300-trt" / "1")]
    run(module("exporters.cli", *trt, "--timing-cache", str(work / "timing.cache"), "--force"), ok=(0, 4))


def bench(args: argparse.Namespace, work: Path, checkpoint: Path, artifact: Path) -> None:
    """Step 5: latency and throughput per batch size, with the post-processing breakdown."""
    sizes = ["--batch-sizes", args.batch_sizes, "--iterations", str(args.iterations)]
    backend = ["backend", "--artifact", str(artifact), *sizes, "--warmup", str(args.warmup), "--breakdown"]
    outputs = ["--json", str(work / "bench.json"), "--csv", str(work / "bench.csv")]
    eager = ["--eager-checkpoint", str(checkpoint)]
    run(module("bench.cli", *backend, *eager, *outputs, "--plot", str(work / "bench.png")))


def worst_case(args: argparse.Namespace, work: Path) -> Any:
    """Step 6: the breakdown for an untrained 80-class ResNet-50 SSD300."""
    worst_ckpt = worst_case_checkpoint(work / "worst-case-r50-80cls.pt")
    worst = work / "models" / "ssd300-r50-80cls" / "1"
    export = module("exporters.cli", "onnx", "--checkpoint", str(worst_ckpt), "--output", str(worst))
    run([*export, "--force", "--no-verify"])
    sizes = ["--batch-sizes", "1,8", "--iterations", str(max(3, args.iterations // 2)), "--warmup", "1"]
    backend = ["backend", "--artifact", str(worst), *sizes, "--breakdown"]
    run(module("bench.cli", *backend, "--json", str(work / "bench-worst-case.json")))
    return json.loads((work / "bench-worst-case.json").read_text())["breakdown"]


def main() -> None:
    args = parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = prepare(args, work)
    artifact = work / "models" / "ssd300" / "1"
    export_and_check(args, work, checkpoint, artifact)
    bench(args, work, checkpoint, artifact)
    summary: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()}",
        "verify": json.loads((work / "verify.json").read_text()).get("coco"),
        "fp16": json.loads((work / "fp16.json").read_text()).get("coco"),
        "bench": json.loads((work / "bench.json").read_text()),
    }
    if args.worst_case:
        summary["worst_case"] = worst_case(args, work)
    (work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"summary: {work / 'summary.json'}")


if __name__ == "__main__":
    main()

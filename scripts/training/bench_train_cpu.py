"""Train a small CPU preset from scratch on the synthetic dataset and report AP, wall time and images/s.

    .venv/bin/python scripts/training/bench_train_cpu.py [--preset ssd300-cpu-small] [--data data/synth]
        [--output runs/<preset>]

Generates the dataset first when it is missing (seed 0: 2000 train / 200 val images), trains with the
preset (``ssd300-cpu-small``, ``ssd320-cpu-small``, ``efficientdet-d0-cpu-small``,
``maskrcnn-cpu-small``) and evaluates on the val split (box AP, and mask AP for mask models). Results go
to ``OUTPUT/bench.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from training.config import PRESETS, make_config
from training.data.synthetic import generate_dataset
from training.train import main as train_main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="data/synth")
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--num-val", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="ssd300-cpu-small", choices=sorted(PRESETS))
    parser.add_argument("--output", help="default: runs/<preset>")
    parser.add_argument("--pipeline", choices=["torch", "dali"])
    parser.add_argument("--epochs", type=int)
    args = parser.parse_args()

    data = Path(args.data)
    if not (data / "annotations" / "instances_train.json").exists():
        t0 = time.perf_counter()
        generate_dataset(data, args.num_train, args.num_val, args.seed)
        print(f"generated {data} in {time.perf_counter() - t0:.1f} s", flush=True)

    output = args.output or f"runs/{args.preset}"
    cfg = make_config(args.preset, data=str(data), output=output, pipeline=args.pipeline, epochs=args.epochs)
    start = time.perf_counter()
    metrics = train_main(cfg)
    wall = time.perf_counter() - start

    log = [json.loads(line) for line in (Path(output) / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in log if r["event"] == "epoch"]
    train_seconds = sum(r["seconds"] for r in epochs)
    images = sum(r["images_per_s"] * r["seconds"] for r in epochs)
    result = {
        "preset": args.preset,
        "pipeline": cfg.pipeline,
        "backbone": cfg.backbone,
        "epochs": cfg.epochs,
        "train_images": args.num_train,
        "AP": metrics["bbox"]["AP"],
        "AP50": metrics["bbox"]["AP50"],
        **({"mask_AP": metrics["segm"]["AP"]} if "segm" in metrics else {}),
        "wall_time_s": round(wall, 1),
        "train_images_per_s": round(images / train_seconds, 2),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
    }
    (Path(output) / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

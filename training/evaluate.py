"""``detect-train eval``: the 12 COCO metrics of a checkpoint on a COCO-format split."""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

import torch
from pycocotools.coco import COCO

from training.coco_eval import METRIC_NAMES
from training.data.coco import resolve_split
from training.detectors.registry import get_task
from training.engine import evaluate
from training.train import default_split
from training.weights import build_checkpoint_model, load_checkpoint


def run_eval(
    checkpoint: str,
    data: str,
    split: str | None = None,
    batch_size: int = 16,
    workers: int = 2,
    device: str = "auto",
    results: str | None = None,
    verbose: bool = True,
) -> dict[str, float]:
    ckpt = load_checkpoint(checkpoint)
    dev = torch.device(
        "cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "cpu"
    )
    task = get_task(ckpt.model_name)(ckpt.model_args)
    model = build_checkpoint_model(ckpt).to(dev).eval()
    split = split or default_split(data, "val")
    _, ann = resolve_split(data, split)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(ann))
    evaluator = evaluate(
        task=task,
        model=model,
        loader=task.eval_loader(data, split, batch_size, workers),
        coco_gt=coco_gt,
        categories=ckpt.categories,
        device=dev,
        verbose=verbose,
    )
    if results:
        evaluator.write_results(results)
    return evaluator.stats["bbox"]


def main(args: argparse.Namespace) -> dict[str, Any]:
    stats = run_eval(
        args.checkpoint,
        args.data,
        args.split,
        args.batch_size,
        args.workers,
        args.device,
        args.results,
        verbose=True,
    )
    width = max(len(n) for n in METRIC_NAMES)
    for name in METRIC_NAMES:
        print(f"{name:>{width}}: {stats[name]:.4f}")
    return stats

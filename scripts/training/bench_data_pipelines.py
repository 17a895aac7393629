"""Throughput of the SSD300 training input pipelines: DALI (CPU) vs the PyTorch DataLoader.

Both run the full training transform (IoU crop, flip, colour twist, resize, normalize, box encoding)
and yield the same ``(images, boxes, labels)`` batches. Startup (pipeline build, worker start, first
batch) is measured separately from the steady state.

    .venv/bin/python scripts/training/bench_data_pipelines.py                 # synthetic set in a temp dir
    .venv/bin/python scripts/training/bench_data_pipelines.py --root DATA --split train2017
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from training.data.loader import LoaderRequest
from training.data.loader import TrainLoader as SSDTrainLoader
from training.data.synthetic import generate_dataset
from training.detectors.ssd300.loaders import ssd_train_loader


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, help="COCO-layout dataset (default: generate a synthetic one)")
    p.add_argument("--split", default="train")
    p.add_argument("--images", type=int, default=384, help="synthetic images to generate")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers / DALI threads")
    p.add_argument("--warmup", type=int, default=2, help="batches before timing starts")
    p.add_argument("--batches", type=int, default=10, help="timed batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--kinds", nargs="+", default=["dali-cpu", "torch"], choices=["dali-cpu", "dali-gpu", "torch"]
    )
    return p


def _batches(loader: SSDTrainLoader) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Batches forever, epoch after epoch (the timed window may cross an epoch boundary)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def bench(make: Callable[[], SSDTrainLoader], warmup: int, batches: int) -> dict[str, float]:
    start = time.perf_counter()
    loader = make()
    stream = _batches(loader)
    images, _, _ = next(stream)
    startup = time.perf_counter() - start
    batch_size = images.shape[0]
    for _ in range(warmup - 1):
        next(stream)
    start = time.perf_counter()
    for _ in range(batches):
        next(stream)
    elapsed = time.perf_counter() - start
    return {
        "startup_s": startup,
        "ms_per_batch": 1000 * elapsed / batches,
        "images_per_s": batch_size * batches / elapsed,
    }


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root
        if root is None:
            root = Path(tmp)
            start = time.perf_counter()
            generate_dataset(root, args.images, 0, seed=args.seed)
            print(f"generated {args.images} synthetic images in {time.perf_counter() - start:.1f} s")

        def maker(kind: str) -> Callable[[], SSDTrainLoader]:
            if kind == "torch":
                return lambda: ssd_train_loader(
                    LoaderRequest("torch", root, args.split, args.batch_size, args.workers, args.seed)
                )
            from training.detectors.ssd300.dali import DaliSSDLoader

            device_id = 0 if kind == "dali-gpu" else None
            return lambda: DaliSSDLoader(
                root, args.split, args.batch_size, args.workers, args.seed, device_id=device_id
            )

        print(
            f"batch {args.batch_size}, {args.workers} workers/threads, {args.warmup} warm-up + "
            f"{args.batches} timed batches, torch threads {torch.get_num_threads()}\n"
        )
        print("| pipeline | images/s | ms/batch | startup + first batch (s) |")
        print("|---|---|---|---|")
        for kind in args.kinds:
            r = bench(maker(kind), args.warmup, args.batches)
            print(f"| {kind} | {r['images_per_s']:.1f} | {r['ms_per_batch']:.0f} | {r['startup_s']:.2f} |")


if __name__ == "__main__":
    main(get_args_parser().parse_args())

"""Runtime cost of each architecture at its CPU preset's size: export, then ``detect-bench backend``.

    .venv/bin/python scripts/training/bench_architectures.py [--presets ssd320-cpu-small,...]
        [--workdir runs/arch-bench] [--batch-sizes 1,8] [--iterations 5]

For each preset an untrained model (the preset's architecture and arguments, the synthetic dataset's
six classes) is saved as a checkpoint, exported with ``detect-export onnx --no-verify`` and timed with
``detect-bench backend --eager-checkpoint`` (ONNX Runtime and PyTorch eager on the CPU, GFLOP per image).
The network's cost does not depend on its weights; the in-graph post-processing's can (an untrained
head passes a different number of candidates to NMS). Accuracy needs a trained checkpoint:
``scripts/training/bench_train_cpu.py --preset ...`` then ``detect-export verify --data``.
Each preset's report lands in ``WORKDIR/<preset>/bench.json``; a failing preset does not stop the others.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from training.checkpoint import save_checkpoint
from training.config import PRESETS
from training.weights import untrained_checkpoint

DEFAULT_PRESETS = ("ssd320-cpu-small", "efficientdet-d0-cpu-small", "maskrcnn-cpu-small")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", default=",".join(DEFAULT_PRESETS))
    parser.add_argument("--workdir", default="runs/arch-bench")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    failed = []
    for preset in args.presets.split(","):
        if preset not in PRESETS:
            parser.error(f"unknown preset {preset!r}; known: {sorted(PRESETS)}")
        work = Path(args.workdir) / preset
        work.mkdir(parents=True, exist_ok=True)
        ckpt = save_checkpoint(untrained_checkpoint(preset), work / "checkpoint.pt")
        artifact = work / "models" / preset / "1"
        export = ["onnx", "--checkpoint", str(ckpt), "--output", str(artifact), "--no-verify", "--force"]
        bench = ["backend", "--artifact", str(artifact), "--eager-checkpoint", str(ckpt)]
        bench += ["--batch-sizes", args.batch_sizes, "--iterations", str(args.iterations), "--warmup", "1"]
        steps = [
            [str(bin_dir / "detect-export"), *export],
            [str(bin_dir / "detect-bench"), *bench, "--json", str(work / "bench.json")],
        ]
        for cmd in steps:
            print("$ " + " ".join(cmd), flush=True)
            if subprocess.run(cmd, check=False).returncode != 0:
                failed.append(preset)
                break
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

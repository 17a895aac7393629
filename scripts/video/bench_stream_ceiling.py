"""The ceiling `detect-bench streams` is measured against: the default model's raw backend throughput
(the backend the server picks, through `service.served.load_backend`), batch 1 and 8, on 640x480 frames of
the synthetic cameras resized to the network input, with the machine's load beside it.

    .venv/bin/python scripts/video/bench_stream_ceiling.py --seconds 10 \
        --out docs/results/streams-ceiling.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench.streams.sources import synthetic_frames
from contract.geometry import resize_for_network
from contract.manifest import Manifest
from service.served import load_backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-repository", type=Path, default=Path("models"))
    parser.add_argument("--seconds", type=float, default=10.0, help="timed per batch size")
    parser.add_argument("--out", type=Path, default=Path("docs/results/streams-ceiling.jsonl"))
    args = parser.parse_args()
    name = (args.model_repository / "default").read_text().strip()
    version_dir = max(
        (p for p in (args.model_repository / name).iterdir() if p.is_dir()), key=lambda p: p.name
    )
    manifest = Manifest.read(version_dir)
    backend = load_backend(version_dir)
    frames = [resize_for_network(f, manifest.input)[0] for f in synthetic_frames(640, 480, 8)]
    for batch in (1, 8):
        images = np.stack(frames[:batch])
        backend.infer(images)  # warm-up
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            backend.infer(images)
            done += batch
        elapsed = time.perf_counter() - started
        row = {
            "model": name,
            "backend": backend.description,
            "batch": batch,
            "images_per_s": round(done / elapsed, 2),
            "load_average": os.getloadavg(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        print(json.dumps(row))
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

"""Video-file throughput (frames per second): ``POST /detect`` with a video against the raw backend on the
same frames (docs/video.md).

Rounds alternate (server, backend, decode, server, backend, decode, ...) so that load from other work on
the machine falls on all of them alike:

- ``server``: ``detect-serve`` on 127.0.0.1 (default settings, this repository's model), the whole video
  posted as ``video/mp4``, the NDJSON answer read to its summary; frames processed / wall seconds as the
  client saw them (decoding, batching, postprocess, tracking and JSON included);
- ``backend``: the same artifact loaded by `service.served.load_backend`, the video's frames decoded
  beforehand (not timed), then resize + ``infer`` in batches of the server's ``max_batch_size`` (8);
- ``decode``: PyAV decoding alone (RGB frames), for scale.

The video is ``detect-train synth --video`` at ``--size`` (made under ``--data`` when missing). Each round
is a line of ``--out`` with ``uptime``'s load; ``--table`` prints medians per kind.

    .venv/bin/python scripts/video/bench_video.py --rounds 3 --out docs/results/video_throughput.jsonl
    .venv/bin/python scripts/video/bench_video.py --out docs/results/video_throughput.jsonl --table
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.server.local_server import local_server, single_model_repository
from contract.geometry import resize_for_network
from service.served import load_backend
from service.video.decoding import VideoLimits, open_video
from training.data.synthetic_video import VideoConfig, generate_video

REPO = Path(__file__).resolve().parents[2]
LIMITS = VideoLimits(8192 * 8192, 10_000_000, 1e9)


@contextlib.contextmanager
def serving(model_dir: Path) -> Iterator[str]:
    """``detect-serve`` on a repository holding only ``model_dir``; yields its base URL."""
    env = {"DETECT_DEFAULT_MODEL": model_dir.name}
    with single_model_repository(model_dir) as repo, local_server(repo, env) as server:
        yield server.url


def through_server(url: str, video: bytes) -> tuple[int, float]:
    started = time.perf_counter()
    summary: dict[str, Any] = {}
    with httpx.stream(
        "POST", f"{url}/detect", content=video, headers={"content-type": "video/mp4"}, timeout=600
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line:
                summary = json.loads(line)
    elapsed = time.perf_counter() - started
    if not summary.get("summary"):
        raise RuntimeError(f"no summary line: {summary}")
    return int(summary["frames_processed"]), elapsed


def decode(video: bytes) -> list[np.ndarray]:
    with open_video(video, LIMITS) as reader:
        return [frame.image for frame in reader.frames()]


def through_backend(backend: Any, frames: list[np.ndarray], batch: int) -> tuple[int, float]:
    started = time.perf_counter()
    for start in range(0, len(frames), batch):
        group = [resize_for_network(f, backend.manifest.input)[0] for f in frames[start : start + batch]]
        backend.infer(np.stack(group))
    return len(frames), time.perf_counter() - started


def _load() -> str:
    return os.getloadavg().__repr__()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="data/synthetic-video-640", help="where the video is made")
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--model-dir", default=str(REPO / "models" / "efficientdet-d0-synth-int8" / "1"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="the backend's batch (the server's default)")
    parser.add_argument("--out", default=str(REPO / "docs" / "results" / "video_throughput.jsonl"))
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.table:
        print_table(out)
        return
    folder = Path(args.data)
    if not (folder / "video.mp4").exists():
        width, height = (int(v) for v in args.size.split("x"))
        generate_video(folder, 0, VideoConfig(width=width, height=height, frames=args.frames))
    video = (folder / "video.mp4").read_bytes()
    backend = load_backend(args.model_dir, "auto")
    frames = decode(video)
    model = backend.manifest.name
    run = time.strftime("%Y-%m-%dT%H:%M:%S")
    with serving(Path(args.model_dir).parent) as url:
        through_server(url, video)  # warm: first requests allocate
        through_backend(backend, frames[: args.batch], args.batch)
        for round_ in range(args.rounds):
            for kind in ("server", "backend", "decode"):
                if kind == "server":
                    count, seconds = through_server(url, video)
                elif kind == "backend":
                    count, seconds = through_backend(backend, frames, args.batch)
                else:
                    started = time.perf_counter()
                    count = len(decode(video))
                    seconds = time.perf_counter() - started
                row = {
                    "run": run,
                    "kind": kind,
                    "round": round_,
                    "model": model,
                    "size": args.size,
                    "frames": count,
                    "seconds": round(seconds, 3),
                    "fps": round(count / seconds, 2),
                    "load": _load(),
                }
                with out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(json.dumps(row))
    print_table(out)


def print_table(path: Path) -> None:
    """Per run (rows without one are the first run) and path: median frames/s and its range."""
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    print("| run | path | rounds | frames | median frames/s (min-max) | 1-min load, first .. last round |")
    print("|---|---|---|---|---|---|")
    for run in dict.fromkeys(r.get("run", "first") for r in rows):
        for kind in ("server", "backend", "decode"):
            group = [r for r in rows if r["kind"] == kind and r.get("run", "first") == run]
            if group:
                fps = [r["fps"] for r in group]
                load = f"{_one_minute(group[0])} .. {_one_minute(group[-1])}"
                print(
                    f"| {run} | {kind} | {len(group)} | {group[0]['frames']} | {statistics.median(fps):.1f} "
                    f"({min(fps):.1f}-{max(fps):.1f}) | {load} |"
                )


def _one_minute(row: dict[str, Any]) -> str:
    return f"{float(row['load'].strip('()').split(',')[0]):.1f}"


if __name__ == "__main__":
    main()

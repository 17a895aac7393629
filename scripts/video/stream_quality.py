"""What the detection budget of stream sessions costs in tracking accuracy, replayed deterministically
(docs/streams.md, "Detection budget"): HOTA, IDF1 and MOTA (Roboflow's ``trackers.eval``, written for
parity with TrackEval) on synthetic videos with ground truth, every ground-truth frame scored (a frame
without an answer counts its objects as misses), for:

- A: the detector on every frame (offline);
- B: the detector on every K-th frame (K = 2, 3, 5), the tracker's predicted boxes in between;
- C: the detection budget (`service.streams.schedule`) for N cameras sharing one detector, replayed on a
  simulated clock (`bench.streams.replay`) with the cost model of the default model on 2 cores
  (67 frames/s at batch 8, 80% of it for streams);
- D: the newest-frame loop without prediction (each camera keeps one frame in the detector's queue,
  frames replaced meanwhile get no answer), on the same simulated detector.

Sequences are ``generate_video`` (training.data.synthetic_video) with the object speed in bins, from
slow to about half a box width per frame, ``--seeds`` each. The model runs once per frame the way the
service runs it (`service.predict.detectors.LocalDetector`), keeping detections at the model's display
threshold (what a session keeps by default); the detections and each frame's motion score are cached
beside the video, so a rerun only replays. In C and D camera 0 plays the scored sequence and the other
N-1 cameras play the next sequences of the set, each at its own phase (fixed by the seed).

    .venv/bin/python scripts/video/stream_quality.py --out docs/results/stream_quality.jsonl
    .venv/bin/python scripts/video/stream_quality.py --out docs/results/stream_quality.jsonl --table
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
from video_quality import evaluate_mot_lines, mot_line  # scripts/: the same MOT scoring

from bench.streams.replay import (
    Answer,
    Camera,
    CostModel,
    replay_every,
    replay_scheduled,
    replay_today,
)
from service.imaging.postprocess import DetectParams, KeptDetections
from service.predict.detectors import LocalDetector
from service.streams.motion import MotionMeter
from service.streams.schedule import SchedulePolicy
from service.video.decoding import VideoLimits, open_video
from service.video.tracking import box_iou
from training.data.synthetic_video import VideoConfig, generate_video

REPO = Path(__file__).resolve().parents[2]
SPEED_BINS = ((1.0, 4.0), (4.0, 10.0), (10.0, 20.0), (20.0, 35.0))  # pixels per frame (boxes 46-100 px)


def sequence_dir(data: Path, speed: tuple[float, float], seed: int) -> Path:
    return data / f"speed-{speed[0]:g}-{speed[1]:g}" / f"seed-{seed}"


def load_camera(folder: Path, speed: tuple[float, float], seed: int, detector: LocalDetector) -> Camera:
    """The sequence's detections and motion scores (made and cached when missing)."""
    cache = folder / "detections.npz"
    if not (folder / "video.mp4").exists():
        generate_video(folder, seed, VideoConfig(speed_range=speed))
    if not cache.exists():
        limits = VideoLimits(8192 * 8192, 10_000_000, 1e9)
        with open_video((folder / "video.mp4").open("rb"), limits) as reader:
            frames = [frame.image for frame in reader.frames()]
        params = DetectParams(score_threshold=detector.manifest.default_threshold)
        found: list[KeptDetections] = []
        for start in range(0, len(frames), 8):
            found.extend(detector.detect(frames[start : start + 8], params))
        meter = MotionMeter()
        motion = [meter.glance(av.VideoFrame.from_ndarray(f, format="rgb24"), "raw").motion for f in frames]
        np.savez(
            cache,
            frame=np.concatenate([np.full(len(k), i) for i, k in enumerate(found)]),
            boxes=np.concatenate([k.boxes for k in found]).reshape(-1, 4),
            scores=np.concatenate([k.scores for k in found]),
            classes=np.concatenate([k.classes for k in found]),
            motion=np.array(motion),
        )
    data = np.load(cache)
    detections = []
    for i in range(len(data["motion"])):
        rows = data["frame"] == i
        n = int(rows.sum())
        detections.append(
            KeptDetections(data["boxes"][rows], data["scores"][rows], data["classes"][rows], np.arange(n))
        )
    video = json.loads((folder / "annotations.json").read_text())["videos"][0]
    return Camera(detections, [float(m) for m in data["motion"]], size=(video["width"], video["height"]))


def score(gt_path: Path, answers: list[Answer | None]) -> dict[str, float]:
    """The answers' boxes with a track id, as a MOT file, evaluated against ``gt_path``."""
    lines = []
    for frame, answer in enumerate(answers, start=1):
        if answer is None:
            continue
        for box, conf, track_id in zip(answer.boxes, answer.scores, answer.track_ids, strict=True):
            if track_id >= 0:
                lines.append(mot_line(frame, int(track_id), box, float(conf)))
    if not lines:  # nothing tracked at all: every ground-truth box is a miss
        boxes = len(gt_path.read_text().splitlines())
        return {"hota": 0.0, "idf1": 0.0, "mota": 0.0, "recall": 0.0, "precision": 0.0, "num_objects": boxes}
    scores = evaluate_mot_lines(gt_path, lines)
    return {key: scores[key] for key in ("hota", "idf1", "mota", "recall", "precision", "num_objects")}


def timing(gt_path: Path, answers: list[Answer | None]) -> dict[str, float]:
    """When objects appear in the answers and how long their boxes outlive them, in frames: an answer's
    box with a track id covers a ground-truth object on a frame where their IoU is at least 0.5 (each
    box and object once, largest IoU first). Sums and counts, so seeds pool by adding them:
    ``appear_sum`` / ``appeared``: frames from an object's first ground-truth frame to the first frame a
    box covers it (``objects`` - ``appeared`` are never covered); ``outlive_sum`` / ``tracks``: frames a
    track id is still answered after the last ground-truth frame of the object it last covered."""
    truth: dict[int, dict[int, np.ndarray]] = {}  # frame (0-based) -> object id -> box
    for line in gt_path.read_text().splitlines():
        frame, obj, x, y, w, h = (float(v) for v in line.split(",")[:6])
        truth.setdefault(int(frame) - 1, {})[int(obj)] = np.array([x, y, x + w, y + h])
    first_gt: dict[int, int] = {}
    last_gt: dict[int, int] = {}
    for frame in sorted(truth):
        for obj in truth[frame]:
            first_gt.setdefault(obj, frame)
            last_gt[obj] = frame
    first_cover: dict[int, int] = {}
    last_seen: dict[int, int] = {}  # track id -> last frame answered
    covers: dict[int, int] = {}  # track id -> object it last covered
    for frame, answer in enumerate(answers):
        if answer is None:
            continue
        tracked = [i for i, t in enumerate(answer.track_ids) if t >= 0]
        for i in tracked:
            last_seen[int(answer.track_ids[i])] = frame
        objects = list(truth.get(frame, {}).items())
        if not tracked or not objects:
            continue
        iou = box_iou(np.asarray(answer.boxes, np.float64)[tracked], np.array([b for _, b in objects]))
        used_rows: set[int] = set()
        used_cols: set[int] = set()
        for flat in np.argsort(-iou, axis=None):
            row, col = divmod(int(flat), iou.shape[1])
            if iou[row, col] < 0.5:
                break
            if row in used_rows or col in used_cols:
                continue
            used_rows.add(row)
            used_cols.add(col)
            obj = objects[col][0]
            first_cover.setdefault(obj, frame)
            covers[int(answer.track_ids[tracked[row]])] = obj
    outlive = [max(0, last_seen[t] - last_gt[obj]) for t, obj in covers.items()]
    return {
        "objects": len(first_gt),
        "appeared": len(first_cover),
        "appear_sum": sum(first_cover[o] - first_gt[o] for o in first_cover),
        "tracks": len(outlive),
        "outlive_sum": sum(outlive),
    }


def cameras_for(scored: int, cameras: list[Camera], count: int, seed: int) -> list[Camera]:
    """``count`` cameras: the scored sequence first, then the next ones of the set, at fixed phases."""
    rng = np.random.default_rng(seed)
    chosen = [cameras[(scored + i) % len(cameras)] for i in range(count)]
    phases = rng.uniform(0, 1 / 15, count)
    return [
        Camera(c.detections, c.motion, c.fps, float(p), c.size) for c, p in zip(chosen, phases, strict=True)
    ]


def runs(
    index: int, cameras: list[Camera], counts: list[int], policy: SchedulePolicy, cost: CostModel
) -> dict[str, tuple[list[Answer | None], float]]:
    """Every configuration's answers for sequence ``index``, and the share of its frames detected."""
    camera = cameras[index]
    out: dict[str, tuple[list[Answer | None], float]] = {}
    for every in (1, 2, 3, 5):
        name = "A: every frame" if every == 1 else f"B: detector every {every} frames + tracker"
        out[name] = (replay_every(camera, every), 1 / every)
    for count in counts:
        group = cameras_for(index, cameras, count, seed=index)
        scheduled, _ = replay_scheduled(group, cost, policy)
        out[f"C: budget, {count} cameras"] = (scheduled[0], _detected_share(scheduled[0]))
        today = replay_today(group, cost)
        out[f"D: newest frame only, {count} cameras"] = (today[0], _detected_share(today[0]))
    return out


def _detected_share(answers: list[Answer | None]) -> float:
    return sum(1 for a in answers if a is not None and a.source == "detected") / max(1, len(answers))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", default="data/stream-quality", help="folder of the sequences (made if missing)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--cameras", type=int, nargs="+", default=[6, 8, 12, 16])
    parser.add_argument("--model-dir", default=str(REPO / "models" / "efficientdet-d0-synth-int8" / "1"))
    parser.add_argument("--out", default=str(REPO / "docs" / "results" / "stream_quality.jsonl"))
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.table:
        print_table(out)
        return
    started = time.monotonic()
    detector = LocalDetector(args.model_dir, "cpu")
    keys = [(speed, seed) for speed in SPEED_BINS for seed in args.seeds]
    folders = [sequence_dir(Path(args.data), speed, seed) for speed, seed in keys]
    cameras = [load_camera(f, speed, seed, detector) for f, (speed, seed) in zip(folders, keys, strict=True)]
    print(f"detections ready after {time.monotonic() - started:.0f} s", flush=True)
    policy, cost = SchedulePolicy(), CostModel()
    rows = []
    for index, ((speed, seed), folder) in enumerate(zip(keys, folders, strict=True)):
        for name, (answers, detected) in runs(index, cameras, args.cameras, policy, cost).items():
            row: dict[str, Any] = {"speed": list(speed), "seed": seed, "config": name}
            row |= score(folder / "gt" / "gt.txt", answers)
            row |= timing(folder / "gt" / "gt.txt", answers)
            row["detected_share"] = round(detected, 4)
            row["model"] = detector.manifest.name
            rows.append(row)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} rows in {time.monotonic() - started:.0f} s", flush=True)
    print_table(out)


def print_table(path: Path) -> None:
    """Per configuration and speed bin: HOTA, IDF1, MOTA pooled over seeds (weighted by ground-truth
    boxes), and the share of frames the detector ran on."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    speeds = list(dict.fromkeys(tuple(r["speed"]) for r in rows))
    header = " | ".join(f"{lo:g}-{hi:g} px/frame" for lo, hi in speeds)
    print(f"| configuration | detected | appears after | outlives | HOTA / IDF1 / MOTA, all | {header} |")
    print("|---|---|---|---|---|" + "---|" * len(speeds))
    for name in dict.fromkeys(r["config"] for r in rows):
        group = [r for r in rows if r["config"] == name]
        cells = [_timing(group), _pooled(group)]
        cells += [_pooled([r for r in group if tuple(r["speed"]) == s]) for s in speeds]
        share = np.mean([r["detected_share"] for r in group])
        print(f"| {name} | {share:.2f} | " + " | ".join(cells) + " |")


def _timing(group: list[dict[str, Any]]) -> str:
    """Mean frames before an object first appears (and the share never covered); mean frames a track's
    box outlives its object."""
    if not all("appear_sum" in r for r in group):
        return "- | -"
    appeared, objects = sum(r["appeared"] for r in group), sum(r["objects"] for r in group)
    delay = sum(r["appear_sum"] for r in group) / max(1, appeared)
    outlive = sum(r["outlive_sum"] for r in group) / max(1, sum(r["tracks"] for r in group))
    return f"{delay:.1f} f ({1 - appeared / max(1, objects):.0%} never) | {outlive:.1f} f"


def _pooled(group: list[dict[str, Any]]) -> str:
    weights = np.array([r["num_objects"] for r in group], dtype=float)
    values = [float(np.average([r[k] for r in group], weights=weights)) for k in ("hota", "idf1", "mota")]
    return " / ".join(f"{v:.3f}" for v in values)


if __name__ == "__main__":
    main()

"""Detection + tracking quality on synthetic videos with ground-truth tracks (docs/video.md): MOTA, IDF1,
HOTA, identity switches, precision and recall by Roboflow's ``trackers.eval`` (written for parity with
TrackEval, the MOT Challenge's evaluation; py-motmetrics 1.4.0, its last release, fails on NumPy 2), for
the service's ByteTrack and Roboflow's (``trackers.ByteTrackTracker``) on the same detections, with each
tracker's time per frame.

Each sequence is ``detect-train synth --video --seed S`` (made under ``--data`` when missing). The model
runs once per frame the way the service runs it (`service.predict.detectors.LocalDetector`, through
``service.served``), keeping detections down to ``--min-score``; each configuration then filters them by
its own threshold and tracks them. A ground-truth box and a tracked box match at IoU >= 0.5; class-agnostic,
as MOT Challenge's evaluation. Untracked detections (no id yet) are not hypotheses.

Resumable: each finished (sequence, configuration) is a line of ``--out``, skipped when run again;
``--table`` prints the Markdown table of docs/video.md.

    .venv/bin/python scripts/video/video_quality.py --seeds 0 1 2 --out docs/results/video_quality.jsonl
    .venv/bin/python scripts/video/video_quality.py --out docs/results/video_quality.jsonl --table
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import supervision as sv
from trackers import ByteTrackTracker
from trackers.eval import evaluate_mot_sequence

from service.imaging.postprocess import DetectParams, KeptDetections
from service.predict.detectors import LocalDetector
from service.video.decoding import VideoLimits, open_video
from service.video.tracking import Tracker, TrackerConfig
from training.data.synthetic_video import generate_video

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Config:
    name: str
    tracker: str  # service | library
    min_score: float  # detections below are dropped before tracking
    high: float
    activation: float


def configs(display: float) -> list[Config]:
    """ByteTrack's defaults, and thresholds set from the model's display threshold."""
    out = []
    for tracker in ("service", "library"):
        out.append(Config(f"{tracker}, defaults, all detections >= 0.1", tracker, 0.1, 0.6, 0.7))
        out.append(Config(f"{tracker}, defaults, detections >= display", tracker, display, 0.6, 0.7))
        out.append(Config(f"{tracker}, high = activation = display", tracker, 0.1, display, display))
    return out


def detect_sequence(detector: LocalDetector, video: Path, min_score: float) -> list[KeptDetections]:
    params = DetectParams(score_threshold=min_score)
    found: list[KeptDetections] = []
    limits = VideoLimits(8192 * 8192, 10_000_000, 1e9)
    with open_video(video.open("rb"), limits) as reader:
        frames = [frame.image for frame in reader.frames()]
    for start in range(0, len(frames), 8):
        found.extend(detector.detect(frames[start : start + 8], params))
    return found


def track(config: Config, detections: list[KeptDetections], fps: float) -> tuple[list[np.ndarray], float]:
    """Each frame's track ids (aligned with its detections above ``min_score``) and seconds per frame."""
    lost = TrackerConfig.for_fps(fps).lost_frames  # one second, as the library's 30 frames at 30 fps
    ours = Tracker(TrackerConfig(config.high, config.activation, 0.1, lost, 2))
    theirs = ByteTrackTracker(
        lost_track_buffer=30,
        frame_rate=fps,
        track_activation_threshold=config.activation,
        high_conf_det_threshold=config.high,
    )
    ids: list[np.ndarray] = []
    spent = 0.0
    for kept in detections:
        keep = kept.scores >= config.min_score
        boxes, scores = kept.boxes[keep].astype(np.float64), kept.scores[keep].astype(np.float64)
        started = time.perf_counter()
        if config.tracker == "service":
            frame_ids = ours.update(boxes, scores)
        else:
            index = np.arange(len(boxes))
            sv_dets = sv.Detections(xyxy=boxes, confidence=scores, data={"index": index})
            result = theirs.update(sv_dets if len(boxes) else sv.Detections.empty())
            frame_ids = np.full(len(boxes), -1, dtype=np.int64)
            if len(result):
                frame_ids[result.data["index"]] = result.tracker_id
        spent += time.perf_counter() - started
        ids.append(_align(keep, frame_ids))
    return ids, spent / max(1, len(detections))


def _align(keep: np.ndarray, kept_ids: np.ndarray) -> np.ndarray:
    out = np.full(len(keep), -1, dtype=np.int64)
    out[np.flatnonzero(keep)] = kept_ids
    return out


def score(gt_path: Path, detections: list[KeptDetections], ids: list[np.ndarray]) -> dict[str, float]:
    """The tracked boxes (those with an id) written as a MOT file and evaluated against ``gt_path``."""
    lines = []
    for frame, (kept, frame_ids) in enumerate(zip(detections, ids, strict=True), start=1):
        for box, score, track_id in zip(kept.boxes, kept.scores, frame_ids, strict=True):
            if track_id >= 0:
                lines.append(mot_line(frame, int(track_id), box, float(score)))
    return evaluate_mot_lines(gt_path, lines)


def mot_line(frame: int, track_id: int, box: Any, score: float) -> str:
    """One tracked box as a line of a MOTChallenge file (frame and id counting from 1, x, y, w, h)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    return f"{frame},{track_id + 1},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},{score:.4f},-1,-1"


def evaluate_mot_lines(gt_path: Path, lines: list[str]) -> dict[str, float]:
    """MOTA, IDF1, HOTA and their parts of the tracked boxes ``lines`` against ``gt_path`` (TrackEval's
    definitions, through ``trackers.eval``)."""
    with tempfile.TemporaryDirectory() as folder:
        hypotheses = Path(folder) / "tracks.txt"
        hypotheses.write_text("\n".join(lines) + "\n")
        result = evaluate_mot_sequence(gt_path, hypotheses, metrics=["CLEAR", "HOTA", "Identity"])
    clear, identity, hota = result.CLEAR, result.Identity, result.HOTA
    assert clear is not None and identity is not None and hota is not None
    return {
        "mota": clear.MOTA,
        "idf1": identity.IDF1,
        "hota": hota.HOTA,
        "num_switches": clear.IDSW,
        "precision": clear.CLR_Pr,
        "recall": clear.CLR_Re,
        "num_objects": clear.CLR_TP + clear.CLR_FN,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="data/synthetic-video", help="folder of sequences (seed-N)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model-dir", default=str(REPO / "models" / "efficientdet-d0-synth-int8" / "1"))
    parser.add_argument("--out", default=str(REPO / "docs" / "results" / "video_quality.jsonl"))
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.table:
        print_table(out)
        return
    done = {(r["seed"], r["config"]) for r in _rows(out)}
    detector = LocalDetector(args.model_dir, "cpu")
    display = detector.manifest.default_threshold
    for seed in args.seeds:
        folder = Path(args.data) / f"seed-{seed}"
        if not (folder / "video.mp4").exists():
            generate_video(folder, seed)
        todo = [c for c in configs(display) if (seed, c.name) not in done]
        if not todo:
            continue
        detections = detect_sequence(detector, folder / "video.mp4", 0.1)
        for config in todo:
            ids, seconds = track(config, detections, 15.0)
            row: dict[str, Any] = {"seed": seed, "config": config.name, **asdict(config)}
            row |= score(folder / "gt" / "gt.txt", detections, ids)
            row["ms_per_frame"] = round(seconds * 1000, 3)
            row["model"] = detector.manifest.name
            with out.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row))
    print_table(out)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def print_table(path: Path) -> None:
    """Per configuration: MOTA and IDF1 pooled over sequences (mean weighted by ground-truth boxes)."""
    rows = _rows(path)
    columns = "MOTA | IDF1 | HOTA | ID switches | precision | recall | tracker ms/frame"
    print(f"| configuration | sequences | {columns} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["config"] for r in rows):
        group = [r for r in rows if r["config"] == name]
        weights = np.array([r["num_objects"] for r in group], dtype=float)

        def mean(key: str, group: list[dict[str, Any]] = group, weights: np.ndarray = weights) -> float:
            return float(np.average([r[key] for r in group], weights=weights))

        switches = sum(int(r["num_switches"]) for r in group)
        ms = np.mean([r["ms_per_frame"] for r in group])
        print(
            f"| {name} | {len(group)} | {mean('mota'):.3f} | {mean('idf1'):.3f} | {mean('hota'):.3f} | "
            f"{switches} | {mean('precision'):.3f} | {mean('recall'):.3f} | {ms:.3f} |"
        )


if __name__ == "__main__":
    main()

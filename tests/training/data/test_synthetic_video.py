"""The synthetic video: its frames, and ground truth that matches what is painted."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np

from training.data.synthetic_video import VideoConfig, generate_video

CONFIG = VideoConfig(width=96, height=72, frames=24, fps=12, objects=5, max_on_screen=3, noise=0.0)


def test_video_and_tracks_are_written_and_deterministic(tmp_path: Path) -> None:
    summary = generate_video(tmp_path / "a", seed=3, cfg=CONFIG)
    generate_video(tmp_path / "b", seed=3, cfg=CONFIG)
    gt_a = (tmp_path / "a" / "gt" / "gt.txt").read_text()
    assert gt_a == (tmp_path / "b" / "gt" / "gt.txt").read_text()
    with av.open(str(tmp_path / "a" / "video.mp4")) as video:
        stream = video.streams.video[0]
        assert (stream.codec_context.width, stream.codec_context.height) == (96, 72)
        assert sum(1 for _ in video.decode(stream)) == 24
    rows = [[float(v) for v in line.split(",")] for line in gt_a.splitlines()]
    assert len(rows) == summary["boxes"] > 0
    frames, ids = {int(r[0]) for r in rows}, {int(r[1]) for r in rows}
    assert min(frames) >= 1 and max(frames) <= 24 and len(ids) == summary["tracks"] >= 2
    for _, _, x, y, w, h, conf, cls, visibility in rows:
        assert (conf, cls) == (1, 1) and 0.3 <= visibility <= 1.0
        assert min(x, y) >= 0 and x + w <= 96 and y + h <= 72 and min(w, h) >= 6
    coco = json.loads((tmp_path / "a" / "annotations.json").read_text())
    assert len(coco["annotations"]) == len(rows)
    assert {a["category_id"] for a in coco["annotations"]} <= {c["id"] for c in coco["categories"]}
    assert "frameRate=12" in (tmp_path / "a" / "seqinfo.ini").read_text()


def test_objects_move_and_their_boxes_follow_the_painted_pixels(tmp_path: Path) -> None:
    generate_video(tmp_path, seed=1, cfg=CONFIG)
    rows = [
        [int(float(v)) for v in line.split(",")[:6]]
        for line in (tmp_path / "gt" / "gt.txt").read_text().splitlines()
    ]
    by_track: dict[int, list[list[int]]] = {}
    for row in rows:
        by_track.setdefault(row[1], []).append(row)
    moved = [t for t, r in by_track.items() if len(r) > 3 and (r[0][2], r[0][3]) != (r[-1][2], r[-1][3])]
    assert moved, "some object changes place over the video"
    with av.open(str(tmp_path / "video.mp4")) as video:
        first = next(video.decode(video=0)).to_ndarray(format="rgb24").astype(int)
    background_like = np.median(first.reshape(-1, 3), axis=0)
    for _, _, x, y, w, h in (r for r in rows if r[0] == 1):
        inside = first[y : y + h, x : x + w].reshape(-1, 3)
        # A shape's box holds pixels far from the typical background colour.
        assert (np.abs(inside - background_like).sum(axis=1) > 60).mean() > 0.2

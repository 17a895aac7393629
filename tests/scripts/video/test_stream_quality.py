"""scripts/video/stream_quality.py's timing measures: when an object first appears in the answers, and how
long a track's box outlives its object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scripts_testkit import load_script

from bench.streams.replay import Answer

quality = load_script("video/stream_quality")


def _answer(boxes: list[list[float]], ids: list[int], source: str = "predicted") -> Answer:
    return Answer(
        np.array(boxes, float).reshape(-1, 4), np.full(len(ids), 0.9), np.array(ids, np.int64), source
    )


def test_appearance_delay_and_outliving_boxes(tmp_path: Path) -> None:
    # Object 1 on frames 1-10 (MOT frames are 1-based), at x 10-50; object 2 on frames 6-10, at x 100-140.
    rows = [f"{f},1,10,10,40,40,1,1,1.0" for f in range(1, 11)]
    rows += [f"{f},2,100,10,40,40,1,1,1.0" for f in range(6, 11)]
    gt = tmp_path / "gt.txt"
    gt.write_text("\n".join(rows) + "\n")
    near = [12.0, 12.0, 52.0, 52.0]  # IoU with object 1 above 0.5
    off = [300.0, 300.0, 340.0, 340.0]  # covers nothing
    answers: list[Answer | None] = [None, _answer([], [])]  # frames 0-1: nothing
    answers += [_answer([near], [0]) for _ in range(2, 13)]  # frames 2-12: track 0 on object 1
    answers += [_answer([near, off], [-1, 5])]  # frame 13: an untracked box and a stray track
    measured = quality.timing(gt, answers)
    assert measured == {"objects": 2, "appeared": 1, "appear_sum": 2, "tracks": 1, "outlive_sum": 3}
    row = {"detected_share": 1.0, **measured}
    assert quality._timing([row, row]) == "2.0 f (50% never) | 3.0 f"

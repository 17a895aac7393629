"""`detect-bench streams`: its arguments, and the resume rule (an N already measured is skipped)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.streams import load as streams_load


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    streams_load.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_are_the_documented_run() -> None:
    args = parse()
    assert (args.streams, args.fps, args.duration, args.warmup) == ("1,2,4,8,16", 15.0, 20.0, 5.0)


def test_rows_of_the_same_model_fps_and_duration_are_skipped_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "streams.jsonl"
    rows = [
        {"model": "m", "streams": 1, "fps": 15.0, "duration_s": 20.0},
        {"model": "m", "streams": 2, "fps": 10.0, "duration_s": 20.0},  # another fps: measured again
        {"model": "m", "streams": 4, "fps": 15.0, "duration_s": 5.0},  # another duration: measured again
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert streams_load._done(out, parse("--out", str(out))) == {("m", 1)}
    assert streams_load._done(tmp_path / "absent.jsonl", parse()) == set()

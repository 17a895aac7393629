"""`scripts/profiling/probe_stream_gaps.py`: per inference thread, the busy share and the gaps between
batches, over the batches wholly inside the measured window."""

from __future__ import annotations

import pytest
from scripts_testkit import load_script


def test_gaps_and_busy_share_per_thread_inside_the_window() -> None:
    batches = [
        ("infer-0", 0.5, 1.5, 1),  # starts before the window: left out
        ("infer-0", 10.0, 10.010, 1),
        ("infer-0", 10.012, 10.022, 2),  # 2 ms gap
        ("infer-0", 10.026, 10.036, 1),  # 4 ms gap
        ("infer-1", 10.0, 10.010, 1),
        ("infer-1", 10.010, 10.020, 1),  # no gap
        ("infer-1", 10.020, 10.030, 1),
        ("infer-1", 29.0, 31.0, 1),  # ends after the window: left out
        ("solo", 10.0, 10.01, 1),  # fewer than three batches: no row
    ]
    rows = {
        row["thread"]: row
        for row in load_script("profiling/probe_stream_gaps").summarize(batches, start=5.0, end=30.0)
    }
    assert set(rows) == {"infer-0", "infer-1"}
    first = rows["infer-0"]
    assert first["batches"] == 3 and first["mean_size"] == pytest.approx(4 / 3)
    assert first["gap_median_ms"] == pytest.approx(3.0) and first["gap_mean_ms"] == pytest.approx(3.0)
    assert first["busy"] == pytest.approx(0.030 / 0.036)
    assert first["batch_median_ms"] == pytest.approx(10.0)
    assert rows["infer-1"]["busy"] == pytest.approx(1.0) and rows["infer-1"]["gap_mean_ms"] == pytest.approx(
        0.0
    )

"""scripts/bench/bench_server_scenario.py: where a server's p99 crosses the bound, between the rates run."""

from __future__ import annotations

import pytest
from scripts_testkit import load_script

scenario = load_script("bench/bench_server_scenario")


def test_the_crossing_is_linear_between_the_last_rate_within_and_the_next() -> None:
    p99s = {10.0: 30.0, 50.0: 80.0, 60.0: 120.0, 70.0: 90.0}  # a lucky round above the crossing: ignored
    assert scenario.p99_crossing(p99s, 100.0) == pytest.approx(55.0)


def test_no_crossing_when_no_rate_or_every_rate_is_within() -> None:
    assert scenario.p99_crossing({10.0: 130.0, 20.0: 150.0}, 100.0) is None
    assert scenario.p99_crossing({10.0: 30.0, 20.0: 50.0}, 100.0) is None

"""scripts/profiling/probe_batcher_loop_cpu.py: the batcher's own event-loop CPU per request."""

from __future__ import annotations

import re

from scripts_testkit import run_script


def test_it_serves_the_callers_and_reports_the_loop_s_cpu_per_request() -> None:
    result = run_script(
        "profiling/probe_batcher_loop_cpu", "--seconds", "0.3", "--rounds", "2", "--batch-ms", "2", "0.5"
    )
    assert result.returncode == 0, result.stderr
    rounds = re.findall(r"round \d: (\d+) req/s, event loop CPU ([\d.]+) us per request", result.stdout)
    assert len(rounds) == 2
    for rate, cpu_us in rounds:
        # Two workers of ~2.5 ms batches serve hundreds per second; the loop's share is microseconds.
        assert int(rate) > 100 and 0 < float(cpu_us) < 5000
    assert re.search(r"median: [\d.]+ us per request", result.stdout)

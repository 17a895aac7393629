"""scripts/bench/batch_policy_model.py: the policies side by side in the queueing model (the model and its
dispatch rules: tests/bench/model/test_queue_model.py)."""

from __future__ import annotations

import json
from pathlib import Path

from scripts_testkit import run_script


def test_adaptive_holds_the_bound_as_long_as_the_better_of_fixed_and_no_batching(tmp_path: Path) -> None:
    out = tmp_path / "policies.json"
    result = run_script(
        "bench/batch_policy_model",
        "--batch-ms", "1=8.39", "2=17.63", "8=55.12", "--fractions", "0.2", "0.9",
        "--requests", "4000", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    policies = report["policies"]
    assert set(policies) == {"fixed", "adaptive", "none"}
    ceilings = {name: p["ceiling_share"] for name, p in policies.items()}
    assert ceilings["adaptive"] >= 0.99 * max(ceilings["fixed"], ceilings["none"])
    # At 0.2 of capacity: one at a time (batches of two cost more than two of one); at 0.9: batches.
    low, high = (policies["adaptive"]["runs"][i] for i in (0, 1))
    assert low["mean_batch"] < 1.01 and high["mean_batch"] > 2
    assert low["p99_ms"] <= policies["fixed"]["runs"][0]["p99_ms"]
    assert "highest rate with p99 <= 100 ms" in result.stdout


def test_it_needs_batch_times_or_a_repository_to_measure() -> None:
    result = run_script("bench/batch_policy_model", "--requests", "100")
    assert result.returncode != 0
    assert "give --batch-ms or --measure" in result.stderr

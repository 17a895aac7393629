"""scripts/bench/server_scenario_model.py: the ceilings it prints and writes (the model:
tests/bench/model)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripts_testkit import ROOT, load_script, run_script

SAMPLE = ROOT / "service" / "static" / "samples" / "shapes-1.jpg"


def test_the_server_s_ceiling_is_below_the_raw_pipeline_s(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    result = run_script("bench/server_scenario_model",
        "--service", "1=69.2", "8=92.7", "--raw", "1=89.6", "8=103.5", "--rates", "60",
        "--requests", "5000", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    server, raw = report["costs"]["server"], report["costs"]["raw pipeline"]
    assert server["fixed_ms"] > raw["fixed_ms"] and server["per_request_ms"] > raw["per_request_ms"]
    assert 0 < server["ceiling_share_of_raw"] < raw["ceiling_share_of_raw"] < 1
    assert [p["rate"] for p in server["predicted"]] == [60.0]
    assert 0 <= report["overhead_share_allowed"] <= 1
    assert "highest rate with p99 <= 100 ms" in result.stdout


def test_it_needs_the_raw_throughput_at_the_largest_batch() -> None:
    result = run_script("bench/server_scenario_model",
        "--service", "1=69.2", "8=92.7", "--raw", "1=89.6", "4=100", "--requests", "1000",
    )  # fmt: skip
    assert result.returncode != 0
    assert "--max-batch 8" in result.stderr


def test_measure_raw_times_the_pipeline_not_inference_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # The raw pipeline (decode to JSON) is what a request costs without a server; inference alone would put
    # the ceiling above what any server of this pipeline can reach.
    from bench.server import backend_throughput

    calls: list[tuple[int, str]] = []

    def timed(repository: str, *, batch_size: int, images: list[bytes], yardstick: str) -> SimpleNamespace:
        assert images, "the pipeline decodes the images given"
        calls.append((batch_size, yardstick))
        return SimpleNamespace(images_per_s=10.0 * batch_size)

    monkeypatch.setattr(backend_throughput, "measure_backend_throughput", timed)
    model = load_script("bench/server_scenario_model")
    rates = model.measured_raw("models", [str(SAMPLE)], [1, 8])
    assert rates == {1: 10.0, 8: 80.0}
    assert calls == [(1, "pipeline"), (8, "pipeline")]

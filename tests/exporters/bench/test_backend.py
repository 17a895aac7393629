"""``detect-bench backend`` on the exported artifact: a tiny run prints the table and writes files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from exporters_testkit import ExportedArtifact

from exporters.bench.backend import COLUMNS
from exporters.bench.cli import main


def test_tiny_run_prints_table_breakdown_and_writes_outputs(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, csv_path, plot_path = tmp_path / "b.json", tmp_path / "b.csv", tmp_path / "b.png"
    args = ["backend", "--artifact", str(exported.directory), "--batch-sizes", "1,2", "--iterations", "2"]
    args += ["--warmup", "1", "--breakdown", "--json", str(json_path), "--csv", str(csv_path)]
    assert main([*args, "--plot", str(plot_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 timed iterations after 1 warm-up per batch size" in out[0]
    assert out[1].split() == ["runtime", "batch", "img/s", "avg", "ms", "p90", "ms", "p95", "ms", "p99", "ms"]
    assert list(COLUMNS) == ["runtime", "batch", "img/s", "avg ms", "p90 ms", "p95 ms", "p99 ms"]
    rows = [line.split() for line in out[3:5]]
    assert [(r[0], r[2]) for r in rows] == [("onnxruntime-cpu", "1"), ("onnxruntime-cpu", "2")]
    assert any("post-processing" in line and "% of network" in line for line in out)
    report = json.loads(json_path.read_text())
    assert len(report["rows"]) == 2 and report["rows"][1]["batch"] == 2
    assert [b["batch"] for b in report["breakdown"]] == [1, 2]
    assert all(b["postprocess_ms"] > 0 for b in report["breakdown"])
    with csv_path.open() as f:
        assert len(list(csv.DictReader(f))) == 2
    assert plot_path.stat().st_size > 0


def test_batch_larger_than_the_artifact_allows_is_an_error(
    exported: ExportedArtifact, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["backend", "--artifact", str(exported.directory), "--batch-sizes", "64", "--iterations", "1"]
    )
    assert code == 2 and "exceed the artifact's max batch 32" in capsys.readouterr().err

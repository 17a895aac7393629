"""GFLOP counting (``FlopCounterMode``) and its place in ``detect-bench backend``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from exporters_testkit import ExportedArtifact
from torch import nn

from bench.backend.flops import checkpoint_gflops, count_gflops
from bench.cli import main


def test_a_convolution_counts_two_flops_per_multiply_add() -> None:
    conv = nn.Sequential(nn.Conv2d(3, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    # 8 x 16 x 16 outputs, each 3 x 3 x 3 multiply-adds; BatchNorm and ReLU count nothing
    assert count_gflops(conv, (3, 16, 16)) == pytest.approx(2 * 8 * 16 * 16 * 27 / 1e9)


def test_backend_bench_reports_gflops_with_an_eager_checkpoint(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "bench.json"
    args = ["backend", "--artifact", str(exported.directory), "--batch-sizes", "1", "--iterations", "1"]
    assert (
        main(
            [*args, "--warmup", "0", "--eager-checkpoint", str(exported.checkpoint), "--json", str(json_path)]
        )
        == 0
    )
    report = json.loads(json_path.read_text())
    # ResNet-18 SSD300 with 3 classes at 300x300: ~11.6 GFLOP, almost all of it convolutions
    assert report["gflops_per_image"] == pytest.approx(checkpoint_gflops(str(exported.checkpoint)))
    assert 11.0 < report["gflops_per_image"] < 12.0
    assert "FlopCounterMode" in report["gflops_method"]
    assert "GFLOP/image" in capsys.readouterr().out

"""scripts/training/bench_gpu_torch.py: its refusal without a GPU (what it measures on one: docs/gpu.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from scripts_testkit import run_script


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the refusal does not run")
def test_without_a_gpu_it_says_so_and_exits_4(tmp_path: Path) -> None:
    result = run_script("training/bench_gpu_torch", "--workdir", str(tmp_path))
    assert result.returncode == 4, result.stderr
    assert "no CUDA device" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing generated or written

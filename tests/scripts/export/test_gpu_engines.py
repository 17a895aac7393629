"""scripts/export/gpu_engines.py: which engines it builds for a repository (every shipped model, parents found
beside their runs), and its refusal without a GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scripts_testkit import ROOT, load_script, run_script

from contract.manifest import Manifest
from exporters.tensorrt.engine import tensorrt_unavailable_reason

engines = load_script("export/gpu_engines")


def _manifest(source: str, target: Path) -> Path:
    target.mkdir(parents=True)
    shutil.copyfile(ROOT / "models" / source / "1" / "manifest.json", target / "manifest.json")
    return target


def test_every_shipped_model_is_grouped_with_its_parent_wherever_it_is(tmp_path: Path) -> None:
    models, runs = tmp_path / "models", tmp_path / "runs"
    ssd300 = _manifest("ssd300-synth", models / "ssd300-synth" / "1")
    ssd300_int8 = _manifest("ssd300-synth-int8", models / "ssd300-synth-int8" / "1")
    mask_int8 = _manifest("maskrcnn-synth-int8", models / "maskrcnn-synth-int8" / "1")
    ssd320_int8 = _manifest("ssd320-synth-int8", models / "ssd320-synth-int8" / "1")
    # Mask R-CNN's parent is where `make maskrcnn-model` leaves it; SSD320's is on no disk here.
    parent = Manifest.read(mask_int8).parent
    assert parent is not None
    mask_parent = runs / "maskrcnn-cpu-small" / "artifact" / parent.name / parent.version
    mask_parent.mkdir(parents=True)
    Manifest.read(ssd300).model_copy(update={"name": parent.name, "version": parent.version}).write(
        mask_parent
    )

    groups = {tuple(group.variants): group for group in engines.shipped(models, runs)}
    assert set(groups) == {(ssd300_int8,), (mask_int8,), (ssd320_int8,)}
    assert groups[(ssd300_int8,)].parent == ssd300
    assert groups[(mask_int8,)].parent == mask_parent
    assert groups[(ssd320_int8,)].parent is None  # INT8 engine only, against the recorded parent AP
    accuracy = Manifest.read(ssd320_int8).accuracy
    assert accuracy is not None and groups[(ssd320_int8,)].recorded_parent_ap == accuracy.parent_box_ap


@pytest.mark.skipif(
    tensorrt_unavailable_reason() is None, reason="a GPU with TensorRT is present: the refusal does not run"
)
def test_without_a_gpu_it_says_so_and_exits_4() -> None:
    result = run_script("export/gpu_engines", "--data", "unused")
    assert result.returncode == 4, result.stderr
    assert "needs an NVIDIA GPU with TensorRT" in result.stderr

"""The engine build configuration, validated against the graph with no GPU, and the engine check's
path through the service's backend loading to its TensorRT backend (stood in for by ONNX Runtime on the
CPU)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from exporters_testkit import ExportedArtifact

from contract.manifest import Manifest
from exporters.errors import ExportError
from exporters.tensorrt.config import BuildConfig
from exporters.tensorrt.engine import check_engine
from service.runtime.backends import tensorrt_backend
from service.runtime.backends.onnxruntime_backend import OnnxRuntimeBackend


def test_build_config_is_validated_against_the_graph(exported: ExportedArtifact) -> None:
    model = onnx.load(str(exported.model_path))
    BuildConfig("images", 300, 300).validate(model)
    with pytest.raises(ExportError, match="min <= opt <= max, got min 4, opt 2"):
        BuildConfig("images", 300, 300, min_batch=4, opt_batch=2).validate(model)
    with pytest.raises(ExportError, match="no input 'pixels'"):
        BuildConfig("pixels", 300, 300).validate(model)
    with pytest.raises(ExportError, match=r"config expects \[B, 320, 320, 3\]"):
        BuildConfig("images", 320, 320).validate(model)
    with pytest.raises(ExportError, match="--workspace-gb must be > 0"):
        BuildConfig("images", 300, 300, workspace_gb=0).validate(model)


def test_build_config_describes_its_profile() -> None:
    config = BuildConfig("images", 300, 300, opt_batch=4, max_batch=16, timing_cache="cache")
    described = config.describe()
    assert described["profile_shapes"] == [[1, 300, 300, 3], [4, 300, 300, 3], [16, 300, 300, 3]]
    assert (described["input_name"], described["timing_cache"], described["workspace_gb"]) == (
        "images",
        "cache",
        None,
    )


def test_the_engine_is_checked_through_the_service_backend_with_the_engine_manifest(
    exported: ExportedArtifact, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[tuple[Manifest, Path]] = []

    class StandIn(OnnxRuntimeBackend):  # what TensorRTBackend(manifest, plan) is given, run on the CPU
        def __init__(self, manifest: Manifest, engine_path: Path) -> None:
            loaded.append((manifest, engine_path))
            super().__init__(manifest, exported.model_path)

    monkeypatch.setattr(tensorrt_backend, "TensorRTBackend", StandIn)
    engine_manifest = Manifest.read(exported.directory).model_copy(
        update={"format": "tensorrt", "file": "model.plan", "max_batch_size": 4}
    )
    report = check_engine(tmp_path, onnx.load(str(exported.model_path)), engine_manifest)
    assert loaded == [(engine_manifest, tmp_path / "model.plan")]
    assert report["contract"] == {"passed": True, "problems": []}
    matches = report["detections_vs_onnxruntime"]
    assert matches["unexplained"] == 0 and matches["matched"] > 0

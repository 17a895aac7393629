"""``detect-export trt``: the argument handling, the no-GPU path, and (GPU only) the engine it builds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from exporters_testkit import ExportedArtifact

from contract.manifest import Manifest
from exporters.cli import EXIT_BAD_INPUT, EXIT_GPU_REQUIRED, main
from exporters.tensorrt.build import export_tensorrt
from exporters.tensorrt.config import TensorRTExportRequest
from exporters.tensorrt.engine import gpu_unavailable_reason, tensorrt_unavailable_reason

NO_GPU = gpu_unavailable_reason()
NO_TENSORRT = tensorrt_unavailable_reason()


def test_trt_refuses_bad_arguments_before_writing(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "trt" / "1"
    base = ["trt", "--artifact", str(exported.directory), "--output", str(output)]
    assert main([*base, "--min-batch", "4", "--opt-batch", "2"]) == EXIT_BAD_INPUT
    assert "min <= opt <= max, got min 4, opt 2" in capsys.readouterr().err
    assert main([*base, "--workspace-gb", "0"]) == EXIT_BAD_INPUT
    assert "--workspace-gb must be > 0" in capsys.readouterr().err
    assert main(["trt", "--artifact", str(tmp_path / "missing"), "--output", str(output)]) == EXIT_BAD_INPUT
    assert "does not exist" in capsys.readouterr().err
    output.mkdir(parents=True)
    assert main(base) == EXIT_BAD_INPUT
    assert "already exists (use --force" in capsys.readouterr().err
    assert list(output.iterdir()) == []


@pytest.mark.skipif(NO_GPU is None, reason="a GPU is present: the no-GPU path does not run here")
def test_without_gpu_trt_writes_the_fp16_artifact_then_exits_4(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "models" / "tiny-trt" / "1"
    args = ["trt", "--artifact", str(exported.directory), "--output", str(output), "--opt-batch", "4"]
    assert main([*args, "--timing-cache", str(tmp_path / "timing.cache")]) == EXIT_GPU_REQUIRED
    err = capsys.readouterr().err
    assert "TensorRT engine not built: no NVIDIA GPU" in err and "model.fp16.onnx" in err
    assert sorted(p.name for p in output.iterdir()) == ["manifest.json", "model.fp16.onnx"]
    onnx.checker.check_model(onnx.load(str(output / "model.fp16.onnx")), full_check=True)
    manifest = Manifest.read(output)
    assert (manifest.format, manifest.precision, manifest.file) == ("onnx", "fp16", "model.fp16.onnx")
    assert (manifest.name, manifest.version) == ("tiny-trt", "1")
    build = manifest.provenance.export_settings["tensorrt_build"]
    assert build["profile_shapes"] == [[1, 300, 300, 3], [4, 300, 300, 3], [32, 300, 300, 3]]
    assert build["result"].startswith("not built: no NVIDIA GPU")
    assert manifest.verification["fp16"]["passed"] and manifest.verification["tensorrt_ops"]["passed"]


@pytest.mark.gpu
@pytest.mark.skipif(NO_TENSORRT is not None, reason=f"needs an NVIDIA GPU with TensorRT: {NO_TENSORRT}")
def test_engine_builds_strongly_typed_and_matches_onnxruntime(
    exported: ExportedArtifact, tmp_path: Path
) -> None:
    output = tmp_path / "trt" / "1"
    cache = tmp_path / "timing.cache"
    request = TensorRTExportRequest(
        exported.directory, output, min_batch=1, opt_batch=2, max_batch=4, timing_cache=cache
    )
    manifest = export_tensorrt(request)
    assert (manifest.format, manifest.precision, manifest.file) == ("tensorrt", "fp16", "model.plan")
    assert cache.stat().st_size > 0
    from service.served import load_backend

    engine = manifest.verification["engine"]
    assert engine["contract"]["passed"] and engine["detections_vs_onnxruntime"]["unexplained"] == 0
    backend = load_backend(output, "tensorrt")  # as the service serves it
    outputs = backend.infer(np.zeros((3, 300, 300, 3), np.uint8))
    backend.close()
    assert outputs["detection_boxes"].shape == (3, manifest.max_detections, 4)

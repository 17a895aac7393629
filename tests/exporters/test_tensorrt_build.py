"""TensorRT: the op-support check, the build configuration, the no-GPU path, and (GPU only) the engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from exporters_testkit import ExportedArtifact
from onnx import TensorProto, helper

from exporters.cli import EXIT_GPU_REQUIRED, main
from exporters.errors import ExportError
from exporters.fp16 import convert_to_fp16
from exporters.tensorrt_build import (
    BuildConfig,
    TensorRTExportRequest,
    check_tensorrt_ops,
    export_tensorrt,
    gpu_unavailable_reason,
    run_engine,
)
from service.manifest import Manifest

NO_GPU = gpu_unavailable_reason()


def test_exported_graphs_use_only_tensorrt_ops(exported: ExportedArtifact) -> None:
    fp32 = onnx.load(str(exported.model_path))
    for model in (fp32, convert_to_fp16(fp32, "images", ["raw_locs", "raw_confs"])):
        report = check_tensorrt_ops(model)
        assert report["passed"], (report["unsupported"], report["problems"])
        assert {"NonMaxSuppression", "TopK", "Conv"} <= set(report["op_counts"])


def _graph(nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6000])],
        [helper.make_tensor_value_info(n.output[0], TensorProto.UNDEFINED, None) for n in nodes],
        initializers,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)]
    )


def test_unsupported_ops_and_constraints_are_reported() -> None:
    k = helper.make_tensor("k", TensorProto.INT64, [1], [5000])
    model = _graph(
        [
            helper.make_node("Unique", ["x"], ["u"], name="unique_node"),
            helper.make_node("FancyOp", ["x"], ["f"], name="custom_node", domain="my.ops"),
            helper.make_node("TopK", ["x", "k"], ["v", "i"], name="big_topk"),
        ],
        [k],
    )
    report = check_tensorrt_ops(model)
    assert not report["passed"]
    assert report["unsupported"] == {"Unique": ["unique_node"], "my.ops::FancyOp": ["custom_node"]}
    assert report["problems"] == ["TopK node 'big_topk': K = 5000 must be < 3840"]


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
@pytest.mark.skipif(NO_GPU is not None, reason=f"needs an NVIDIA GPU with TensorRT: {NO_GPU}")
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
    engine = manifest.verification["engine"]
    assert engine["contract"]["passed"] and engine["detections_vs_onnxruntime"]["unexplained"] == 0
    outputs = run_engine(output / "model.plan", np.zeros((3, 300, 300, 3), np.uint8))
    assert outputs["detection_boxes"].shape == (3, manifest.max_detections, 4)

"""``--weight-storage float16``: half the file, fp32 compute, still verified against eager PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from exporters_testkit import ExportedArtifact

from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.evaluation.verify import verify_artifact
from exporters.onnx.graph import restore_weights_fp32, store_weights_fp16, with_outputs
from exporters.onnx.ort_cpu import cpu_session
from exporters.precision.fp16 import convert_to_fp16, fp16_fraction


def test_store_weights_fp16_halves_large_weights_and_keeps_outputs(exported: ExportedArtifact) -> None:
    model = onnx.load(str(exported.directory / "model.onnx"))
    stored = store_weights_fp16(model)
    before = sum(i.ByteSize() for i in model.graph.initializer)
    after = sum(i.ByteSize() for i in stored.graph.initializer)
    assert after < 0.55 * before
    fp16 = [i for i in stored.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    assert fp16 and all(i.name.endswith("__fp16") for i in fp16)
    onnx.checker.check_model(stored, full_check=True)
    # The raw head outputs move only by the weights' fp16 rounding.
    raw = list(exported.manifest.provenance.export_settings["raw_outputs"])
    images = np.random.default_rng(0).integers(0, 256, (2, 300, 300, 3), dtype=np.uint8)
    out32 = cpu_session(with_outputs(model, raw)).run(raw, {"images": images})
    out16 = cpu_session(with_outputs(stored, raw)).run(raw, {"images": images})
    for a, b in zip(out32, out16, strict=True):
        rel = float(np.abs(a - b).max() / np.abs(a).max())
        assert 0 < rel < 1e-2


def test_export_with_float16_storage_verifies(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "models" / "half" / "1"
    manifest = export_onnx(
        OnnxExportRequest(checkpoint=tiny_checkpoint, output=out, weight_storage="float16")
    )
    assert manifest.verification["passed"] is True
    assert manifest.provenance.export_settings["weight_storage"] == "float16"
    assert manifest.precision == "fp32"  # compute precision
    report = verify_artifact(out, tiny_checkpoint, write=False)
    assert report.passed is True
    assert report.tolerances["raw_rel"] == 1e-2


def test_restore_weights_fp32_undoes_the_storage_exactly(exported: ExportedArtifact) -> None:
    model = onnx.load(str(exported.directory / "model.onnx"))
    stored = store_weights_fp16(model)
    restored = restore_weights_fp32(stored)
    assert not any(n.name.endswith("__cast") for n in restored.graph.node)
    assert all(i.data_type != onnx.TensorProto.FLOAT16 for i in restored.graph.initializer)
    assert len(restored.graph.node) == len(model.graph.node)
    onnx.checker.check_model(restored, full_check=True)
    images = np.random.default_rng(1).integers(0, 256, (1, 300, 300, 3), dtype=np.uint8)
    names = [o.name for o in model.graph.output]
    expected = cpu_session(stored).run(names, {"images": images})
    for a, b in zip(expected, cpu_session(restored).run(names, {"images": images}), strict=True):
        np.testing.assert_array_equal(a, b)  # the same float32 values, only stored differently


def test_fp16_graph_converts_from_a_float16_storage_artifact(exported: ExportedArtifact) -> None:
    model = store_weights_fp16(onnx.load(str(exported.directory / "model.onnx")))
    raw = list(exported.manifest.provenance.export_settings["raw_outputs"])
    fp16 = convert_to_fp16(model, "images", raw)  # the FP16 graph of `trt` / `fp16-eval`
    assert fp16_fraction(fp16)["conv_fp16"] == fp16_fraction(fp16)["conv_total"] > 0
    images = np.random.default_rng(2).integers(0, 256, (1, 300, 300, 3), dtype=np.uint8)
    out = cpu_session(fp16).run(["num_detections"], {"images": images})[0]
    assert out.shape == (1, 1)

"""``detect-export verify``: eager PyTorch vs the artifact, with and without a dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from exporters_testkit import ExportedArtifact, copy_artifact
from onnx import numpy_helper

from contract.manifest import Manifest
from exporters.cli import EXIT_VERIFICATION, main
from exporters.evaluation.verify import verify_artifact


def test_verify_with_data_compares_coco_ap_and_records_it(
    exported: ExportedArtifact, synthetic_data: Path, tmp_path: Path
) -> None:
    artifact = copy_artifact(exported, tmp_path)
    report = verify_artifact(
        artifact, exported.checkpoint, data=str(synthetic_data), split="val", batch_size=2
    )
    assert report.passed, report.summary
    assert report.batch_sizes == [1, 3] and report.checkpoint_sha256_matches
    assert all(r["max_rel_error"] < 1e-4 for r in report.raw_outputs.values())
    assert report.coco is not None
    coco = report.coco.to_dict()
    assert coco["split"] == "val" and abs(coco["ap_delta"]) <= 1e-3
    assert coco["eager"]["AP"] == pytest.approx(coco["onnx"]["AP"], abs=1e-3)
    manifest = Manifest.read(artifact)
    assert manifest.verification == report.to_dict()
    display = report.display_threshold  # F1-optimal on the same split, from the ONNX detections
    assert display is not None
    assert manifest.display_score_threshold == display["threshold"] and 0 < display["threshold"] <= 1
    assert manifest.metrics["display_threshold"] == display and display["ground_truth"] > 0
    assert (
        manifest.metrics["coco_ap"] == coco["onnx_ap"] and manifest.metrics["checkpoint"]["coco_ap"] == 0.125
    )


def test_a_tampered_graph_fails_verification_with_exit_3(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    artifact = copy_artifact(exported, tmp_path)
    model = onnx.load(str(artifact / "model.onnx"))
    conv_weights = {n.input[1] for n in model.graph.node if n.op_type == "Conv"}
    init = next(i for i in model.graph.initializer if i.name in conv_weights)
    weights = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array(weights + np.float32(0.05) * np.sign(weights), init.name))
    onnx.save(model, str(artifact / "model.onnx"))
    code = main(["verify", "--artifact", str(artifact), "--checkpoint", str(exported.checkpoint)])
    assert code == EXIT_VERIFICATION
    printed = capsys.readouterr().out
    assert printed.startswith("FAILED: raw_locs rel err")
    assert "detect-export onnx --no-verify" in printed  # the failure names what skips the check
    assert Manifest.read(artifact).verification["passed"] is False


def test_display_threshold_from_the_artifact_alone(
    exported: ExportedArtifact, synthetic_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    artifact = copy_artifact(exported, tmp_path)
    code = main(["display-threshold", "--artifact", str(artifact), "--data", str(synthetic_data)])
    assert code == 0
    manifest = Manifest.read(artifact)
    chosen = manifest.metrics["display_threshold"]
    assert manifest.display_score_threshold == chosen["threshold"]
    assert chosen["method"] == "F1-optimal, IoU 0.5, classes pooled" and chosen["dataset"].endswith("(val)")
    # the quality baseline is counted again at the new threshold
    assert manifest.quality is not None and manifest.quality.display_threshold == chosen["threshold"]
    assert capsys.readouterr().out.startswith(f"display_score_threshold {chosen['threshold']:.4f}: F1 ")


def test_a_graph_with_different_nms_fails_on_detections_alone(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The network is untouched (raw outputs equal), but NMS suppresses at IoU 0.9 instead of the
    # manifest's: boxes eager PyTorch suppressed survive. Ties cannot explain them away.
    artifact = copy_artifact(exported, tmp_path)
    model = onnx.load(str(artifact / "model.onnx"))
    (nms,) = [n for n in model.graph.node if n.op_type == "NonMaxSuppression"]
    init = next(i for i in model.graph.initializer if i.name == nms.input[3])
    init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), 0.9), init.name))
    onnx.save(model, str(artifact / "model.onnx"))
    code = main(["verify", "--artifact", str(artifact), "--checkpoint", str(exported.checkpoint)])
    assert code == EXIT_VERIFICATION
    report = Manifest.read(artifact).verification
    assert all(r["max_rel_error"] < 1e-4 for r in report["raw_outputs"].values())
    assert report["detections"]["unexplained"] > 0, report["summary"]
    assert "detect-export onnx --no-verify" in capsys.readouterr().out

"""Typed reports keep the manifest's JSON layout; one AP comparison serves verify, fp16-eval and quantize."""

from __future__ import annotations

from pathlib import Path

import pytest
from exporters_testkit import ExportedArtifact

from contract.manifest import Manifest
from exporters.evaluation.coco_ap import APComparison
from exporters.evaluation.reports import (
    CocoCheck,
    ContractCheck,
    Fp16Report,
    VerificationReport,
    record_verification,
)

BOX = {"AP": 0.5, "AP50": 0.8}
SEGM = {"AP": 0.4, "AP50": 0.7}


def test_ap_comparison_deltas_tolerance_and_layout() -> None:
    ap = APComparison("eager", "onnx", BOX, {"AP": 0.5004, "AP50": 0.8}, SEGM, {"AP": 0.398, "AP50": 0.7})
    assert ap.ap_delta == pytest.approx(0.0004) and ap.mask_ap_delta == pytest.approx(-0.002)
    assert ap.within(0.003) and not ap.within(1e-3)  # the mask AP decides
    assert list(ap.to_dict()) == [
        "eager_ap",
        "onnx_ap",
        "ap_delta",
        "eager",
        "onnx",
        "eager_mask_ap",
        "onnx_mask_ap",
        "mask_ap_delta",
        "eager_segm",
        "onnx_segm",
    ]
    boxes_only = APComparison("fp32", "fp16", BOX, BOX)
    assert boxes_only.mask_ap_delta is None and list(boxes_only.to_dict())[-1] == "fp16"


def _verification(coco: CocoCheck | None) -> VerificationReport:
    return VerificationReport(
        passed=True,
        summary="ok",
        runtime="onnxruntime",
        batch_sizes=[1, 3],
        tolerances={"ap": 1e-3},
        score_tolerances_used=[1e-5, 1e-5],
        raw_outputs={"raw": {"max_abs_error": 0.0, "max_rel_error": 0.0}},
        contract=ContractCheck([]),
        detections={"matched": 3},
        checked_at="now",
        checkpoint_sha256="abc",
        checkpoint_sha256_matches=True,
        coco=coco,
        display_threshold={"threshold": 0.4, "f1": 0.9},
    )


def test_verification_report_layout_and_what_it_writes_into_the_manifest(
    exported: ExportedArtifact, tmp_path: Path
) -> None:
    coco = CocoCheck("data", "val", None, APComparison("eager", "onnx", BOX, BOX))
    report = _verification(coco)
    # The layout detect-export verify has always written (key order included).
    expected = {
        "passed": True,
        "summary": "ok",
        "runtime": "onnxruntime",
        "reference": report.reference,
        "batch_sizes": [1, 3],
        "tolerances": {"ap": 1e-3},
        "score_tolerances_used": [1e-5, 1e-5],
        "raw_outputs": {"raw": {"max_abs_error": 0.0, "max_rel_error": 0.0}},
        "contract": {"passed": True, "problems": []},
        "detections": {"matched": 3},
        "checked_at": "now",
        "checkpoint_sha256": "abc",
        "checkpoint_sha256_matches": True,
        "coco": {"dataset": "data", "split": "val", "max_images": None, **coco.ap.to_dict()},
        "display_threshold": {"threshold": 0.4, "f1": 0.9},
    }
    assert list(report.to_dict().items()) == list(expected.items())
    record_verification(exported.manifest, tmp_path, report, "data")
    written = Manifest.read(tmp_path)
    assert written.verification == report.to_dict() and written.display_score_threshold == 0.4
    assert written.metrics["coco_ap"] == 0.5 and written.metrics["dataset"] == "data (val)"
    assert written.metrics["bbox"] == BOX and "segm" not in written.metrics


def test_fp16_report_layout() -> None:
    report = Fp16Report(
        passed=False,
        batch_sizes=[1, 3],
        tolerances={"ap": 0.002},
        raw_outputs={},
        contract=ContractCheck(["images: FP32 type 2, FP16 type 1"]),
        detections_vs_fp32={},
        fp16_share={"conv_fp16": 1},
        fp16_graph="converted from the artifact",
        checked_at="now",
    )
    out = report.to_dict()
    assert out["contract"]["passed"] is False and "masks_vs_fp32" not in out and "coco" not in out
    assert list(out)[-2:] == ["fp16_graph", "checked_at"]

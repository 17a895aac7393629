"""The default-model rule (scripts/models/choose_default_model.py) on a measurement of the shipped
artifacts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from scripts_testkit import load_script

ROOT = Path(__file__).resolve().parents[3]


rule = load_script("models/choose_default_model")
Candidate = rule.Candidate


def test_the_most_accurate_fast_model_wins() -> None:
    slow_best = Candidate("maskrcnn", "onnxruntime fp32", 0.70, 4.0)
    fast = Candidate("ssd320-int8", "openvino int8", 0.68, 60.0)
    faster_worse = Candidate("ssd300-int8", "openvino int8", 0.45, 150.0)
    assert rule.choose_default([slow_best, fast, faster_worse]) == fast


def test_ap_within_the_gate_goes_to_the_faster_model() -> None:
    fp32 = Candidate("m", "onnxruntime fp32", 0.4556, 25.5)
    int8 = Candidate("m-int8", "openvino int8", 0.4548, 157.0)
    bf16 = Candidate("m-bf16", "openvino bf16", 0.4558, 106.0)
    assert rule.choose_default([fp32, int8, bf16]) == int8
    with pytest.raises(ValueError, match="no artifact reaches 200 img/s"):
        rule.choose_default([fp32, int8, bf16], min_images_per_s=200)


def test_each_artifact_counts_as_auto_serves_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    artifacts = {}
    for name in ("ssd300-synth", "ssd300-synth-int8"):
        artifacts[name] = tmp_path / name / "1"
        artifacts[name].mkdir(parents=True)
        shutil.copy(ROOT / "models" / name / "1" / "manifest.json", artifacts[name])

    def variant(
        name: str, label: str, backend: str, precision: str, ap: float, ips: float
    ) -> dict[str, object]:
        return {
            "label": label,
            "artifact": str(artifacts[name]),
            "backend": backend,
            "openvino_precision": precision,
            "ap": ap,
            "images_per_s": {"1": ips},
        }

    report = {
        "batch_sizes": [1],
        "variants": [
            variant("ssd300-synth", "onnxruntime fp32", "cpu", "manifest", 0.4556, 25.0),
            variant(
                "ssd300-synth", "openvino bf16", "openvino", "bf16", 0.4558, 106.0
            ),  # not how it is served
            variant("ssd300-synth-int8", "onnxruntime int8", "cpu", "manifest", 0.4527, 20.0),
            variant("ssd300-synth-int8", "openvino int8", "openvino", "manifest", 0.4548, 157.0),
        ],
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert rule.main([str(path), "--write", str(tmp_path / "default")]) == 0
    assert (tmp_path / "default").read_text() == "ssd300-synth-int8\n"
    out = capsys.readouterr().out
    assert "ssd300-synth-int8    openvino int8 " in out
    assert "ssd300-synth         onnxruntime fp32" in out  # served as fp32 in ONNX Runtime

    assert rule.main([str(path), "--min-images-per-s", "1000"]) == 2
    assert "error: no artifact reaches 1000 img/s at batch 1" in capsys.readouterr().err

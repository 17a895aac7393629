"""The real-photo model's recipe, run again: MediaPipe's TFLite SSD fetched from the npm registry (cached in
data/downloads), imported and verified against Google's TFLite runtime; the result answers as the shipped
artifact does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image
from scripts_testkit import ROOT, run_script

from contract.manifest import Manifest
from exporters import cli

SHIPPED = ROOT / "models" / "ssd-mobilenetv2-oidv4" / "1"
SAMPLES = [
    ROOT / "service" / "static" / "samples" / f"{n}.jpg"
    for n in ("astronaut", "chelsea", "coffee", "grace_hopper")
]


def _outputs(version_dir: Path, images: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": images})  # type: ignore[no-any-return]


@pytest.mark.timeout(300)
def test_the_recipe_reproduces_the_shipped_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "source"
    fetched = run_script(
        "models/fetch_mediapipe_ssd",
        "--out",
        str(source),
        "--cache",
        str(ROOT / "data" / "downloads"),
        timeout=240,
    )
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads((source / "import.json").read_text())["name"] == "ssd-mobilenetv2-oidv4"
    out = tmp_path / "models" / "ssd-mobilenetv2-oidv4" / "1"
    args = ["import", "--source", str(source / "model.tflite"), "--spec", str(source / "import.json")]
    code = cli.main([*args, "--output", str(out), "--samples", *map(str, SAMPLES)])
    assert code == 0, capsys.readouterr()
    verification = Manifest.read(out).verification
    assert verification["reference"].startswith("ai-edge-litert")
    assert verification["raw_max_abs_error"] < 1e-3 and verification["max_box_error_px"] <= 0.5
    assert verification["matched"] == verification["reference_detections"] >= 20
    images = np.stack(
        [
            np.asarray(Image.open(p).convert("RGB").resize((300, 300), Image.Resampling.BILINEAR))
            for p in SAMPLES
        ]
    )
    for made, shipped in zip(_outputs(out, images), _outputs(SHIPPED, images), strict=True):
        assert np.allclose(made, shipped, atol=1e-5)

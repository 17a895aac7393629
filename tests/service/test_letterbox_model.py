"""A letterboxed model (an exported EfficientDet-D0) served over POST /detect: for tall and wide images
the boxes come back in the image's own pixels, mapped through the letterbox, not a stretch."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from detectors_testkit import make_efficientdet_checkpoint
from service_testkit import encode, make_settings, start_client

from contract.manifest import Manifest
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.onnx.ort_cpu import cpu_session, run_contract
from service.app import create_app
from training.data.synthetic import render_sample

SIDE = 128


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("letterbox-serve")
    checkpoint = make_efficientdet_checkpoint(root / "checkpoint.pt")
    export_onnx(
        OnnxExportRequest(checkpoint=checkpoint, output=root / "models" / "effdet" / "1", verify=False)
    )
    return root / "models"


def letterbox_by_hand(image: np.ndarray, pad: tuple[int, int, int]) -> tuple[np.ndarray, float, float]:
    """The manifest's contract written out: one scale, rounded size, top-left paste; returns the
    network input and the original pixels per normalized unit along x and y."""
    height, width = image.shape[:2]
    scale = min(SIDE / width, SIDE / height)
    new_w, new_h = round(width * scale), round(height * scale)
    canvas = np.empty((SIDE, SIDE, 3), dtype=np.uint8)
    canvas[...] = pad
    canvas[:new_h, :new_w] = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_AREA)
    return canvas, SIDE * width / new_w, SIDE * height / new_h


@pytest.mark.parametrize(("height", "width"), [(360, 100), (100, 360)], ids=["tall", "wide"])
def test_boxes_come_back_in_original_pixels(repository: Path, height: int, width: int) -> None:
    manifest = Manifest.read(repository / "effdet" / "1")
    assert manifest.input.resize == "letterbox"
    scene, _ = render_sample(np.random.default_rng(height))
    image = np.ascontiguousarray(cv2.resize(scene, (width, height), interpolation=cv2.INTER_AREA))

    canvas, per_x, per_y = letterbox_by_hand(image, manifest.input.pad_value)
    out = run_contract(cpu_session(repository / "effdet" / "1" / manifest.file), canvas[None])
    n = int(out["num_detections"][0, 0])
    keep = out["detection_scores"][0, :n] >= manifest.score_threshold
    normalized = out["detection_boxes"][0, :n][keep]
    expected = np.clip(normalized * [per_x, per_y, per_x, per_y], 0, [width, height, width, height])
    stretched = np.clip(normalized * [width, height, width, height], 0, [width, height, width, height])
    assert np.abs(expected - stretched).max() > 5  # the two mappings differ: the test can tell them apart

    client = start_client(create_app(make_settings(repository, max_batch_size=2)))
    try:
        response = client.post(
            "/v1/detect",
            params={"model": "effdet"},
            content=encode(image, ".png"),  # lossless: the service decodes the same pixels
            headers={"content-type": "image/png"},
        )
    finally:
        client.__exit__(None, None, None)
    assert response.status_code == 200, response.text
    served = response.json()
    assert (served["width"], served["height"]) == (width, height)
    got = np.array([[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in served["detections"]])
    assert len(got) == len(expected) > 0
    np.testing.assert_allclose(got, expected, atol=0.02)  # served rounded to 0.01 px

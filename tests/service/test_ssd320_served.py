"""An exported SSD320 served through ``POST /detect``: the service needs nothing model-specific, so its
detections must equal the artifact's own ONNX Runtime detections (stretch resize, boxes mapped back)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from detectors_testkit import make_ssd320_checkpoint
from service_testkit import encode, make_settings, start_client

from contract.manifest import Manifest
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.evaluation.coco_ap import stretch_resize
from exporters.onnx.ort_cpu import cpu_session, run_contract
from service.app import create_app
from training.data.synthetic import render_sample


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository holding one tiny SSD320 (64x64) exported by ``detect-export onnx``."""
    root = tmp_path_factory.mktemp("ssd320")
    checkpoint = make_ssd320_checkpoint(root / "checkpoint.pt", image_size=64)
    export_onnx(
        OnnxExportRequest(checkpoint=checkpoint, output=root / "models" / "ssd320" / "1", verify=False)
    )
    return root / "models"


def test_served_detections_equal_the_artifacts_onnx_runtime_detections(repository: Path) -> None:
    directory = repository / "ssd320" / "1"
    manifest = Manifest.read(directory)
    assert (manifest.architecture, manifest.input.resize) == ("ssd320", "stretch")
    session = cpu_session(directory / manifest.file)
    client = start_client(create_app(make_settings(repository, max_batch_size=4)))
    try:
        rng = np.random.default_rng(7)
        for _ in range(2):
            image, _objects = render_sample(rng)  # RGB, not the network's size nor square
            height, width = image.shape[:2]
            resized = stretch_resize(image, manifest.input.height, manifest.input.width)
            out = run_contract(session, resized[None])
            n = int(out["num_detections"][0, 0])
            # A request threshold between the 20th and 21st score: the service must drop the rest.
            threshold = float(out["detection_scores"][0, 19] + out["detection_scores"][0, 20]) / 2
            keep = out["detection_scores"][0, :n] >= threshold
            scale = np.array([width, height, width, height])
            boxes = np.clip(out["detection_boxes"][0, :n][keep] * scale, 0, scale)
            classes = out["detection_classes"][0, :n][keep]
            scores = out["detection_scores"][0, :n][keep]

            response = client.post(
                "/v1/detect",
                params={"model": "ssd320", "score_threshold": threshold},
                content=encode(image, ".png"),  # lossless: the service decodes the very same pixels
                headers={"content-type": "image/png"},
            )
            assert response.status_code == 200, response.text
            served = response.json()
            assert (served["width"], served["height"]) == (width, height)

            detections = served["detections"]
            assert len(detections) == len(scores) == 20
            for det, box, cls, score in zip(detections, boxes, classes, scores, strict=True):
                assert det["class_id"] == int(cls) and det["label"] == manifest.labels[int(cls)].name
                assert det["score"] == pytest.approx(float(score), abs=1e-5)
                assert np.allclose([det["box"][k] for k in ("x1", "y1", "x2", "y2")], box, atol=1e-2)

        # Without a request threshold the manifest's (TF's 1e-8) applies: all K = 100 rows come back.
        response = client.post(
            "/v1/detect",
            params={"model": "ssd320"},
            content=encode(image, ".png"),
            headers={"content-type": "image/png"},
        )
        assert response.status_code == 200 and len(response.json()["detections"]) == n == 100
    finally:
        client.__exit__(None, None, None)

"""The committed default model: a real trained SSD300 that serves exactly what its artifact computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_testkit import encode, make_settings, start_client

from contract.manifest import Manifest
from exporters.evaluation.coco_ap import stretch_resize
from exporters.onnx.ort_cpu import cpu_session, run_contract
from service.app import create_app
from service.runtime.default_model import DefaultModelError, read_default_file, resolve_default_model
from training.data.synthetic import render_sample

REPOSITORY = Path(__file__).resolve().parents[3] / "models"
DEFAULT = REPOSITORY / "ssd300-synth" / "1"


def test_default_model_is_small_trained_and_verified() -> None:
    manifest = Manifest.read(DEFAULT)
    assert (DEFAULT / manifest.file).stat().st_size <= 25 * 1024 * 1024
    assert manifest.architecture == "ssd300"
    assert manifest.verification["passed"] is True
    # AP of this very artifact as served on the synthetic val split that `detect-train synth --seed 0`
    # writes, measured by `detect-export eval` (test_shipped_accuracy.py reproduces it over HTTP); an
    # untrained SSD300 scores ~0.00 there.
    assert manifest.metrics["source"].startswith("detect-export eval")
    assert manifest.accuracy is not None and manifest.accuracy.box_ap == manifest.metrics["coco_ap"] >= 0.45


def test_served_detections_equal_the_artifacts_onnx_runtime_detections() -> None:
    manifest = Manifest.read(DEFAULT)
    session = cpu_session(DEFAULT / manifest.file)
    client = start_client(create_app(make_settings(REPOSITORY, max_batch_size=4)))
    try:
        rng = np.random.default_rng(2024)
        compared = 0
        for _ in range(3):
            image, _objects = render_sample(rng)  # RGB, a size other than the network's
            height, width = image.shape[:2]
            response = client.post(
                "/v1/detect",
                params={"model": manifest.name},
                content=encode(image, ".png"),  # lossless: the service decodes the very same pixels
                headers={"content-type": "image/png"},
            )
            assert response.status_code == 200, response.text
            served = response.json()
            assert (served["width"], served["height"]) == (width, height)

            resized = stretch_resize(image, manifest.input.height, manifest.input.width)
            out = run_contract(session, resized[None])
            n = int(out["num_detections"][0, 0])
            keep = out["detection_scores"][0, :n] >= manifest.default_threshold
            boxes = out["detection_boxes"][0, :n][keep] * np.array([width, height, width, height])
            classes = out["detection_classes"][0, :n][keep]
            scores = out["detection_scores"][0, :n][keep]

            detections = served["detections"]
            assert len(detections) == len(scores) > 0
            for det, box, cls, score in zip(detections, boxes, classes, scores, strict=True):
                assert det["class_id"] == int(cls)
                assert det["category_id"] == manifest.labels[int(cls)].coco_id
                assert det["label"] == manifest.labels[int(cls)].name
                assert det["score"] == pytest.approx(float(score), abs=1e-5)  # served rounded to 5 places
                got = [det["box"][k] for k in ("x1", "y1", "x2", "y2")]
                expected = np.clip(box, 0, [width, height, width, height])
                assert np.allclose(got, expected, atol=6e-3)  # served rounded to 0.01 px
            compared += len(detections)
        assert compared >= 3
    finally:
        client.__exit__(None, None, None)


def test_the_repository_declares_its_default_model() -> None:
    # scripts/models/choose_default_model.py's rule over the run in docs/cpu-inference.md
    assert read_default_file(REPOSITORY) == "efficientdet-d0-synth-int8"
    # Another model exported next to it changes nothing.
    declared = "efficientdet-d0-synth-int8"
    assert resolve_default_model(None, REPOSITORY, {declared, "a-newer-model"}) == declared


def test_default_model_resolution_order(tmp_path: Path) -> None:
    assert resolve_default_model(None, tmp_path, {"only"}) == "only"
    assert resolve_default_model(None, tmp_path, {"a", "b"}) is None  # several, none declared: no guess
    (tmp_path / "default").write_text("# the model plain requests get\nb\n\n")
    assert resolve_default_model(None, tmp_path, {"a", "b"}) == "b"
    assert resolve_default_model("a", tmp_path, {"a", "b"}) == "a"  # the setting wins over the file
    with pytest.raises(DefaultModelError, match=r"default model 'c' \(from DETECT_DEFAULT_MODEL\) is not in"):
        resolve_default_model("c", tmp_path, {"a", "b"})
    (tmp_path / "default").write_text("gone\n")
    with pytest.raises(DefaultModelError, match=r"'gone' \(from .*default\) is not in the repository"):
        resolve_default_model(None, tmp_path, {"a", "b"})
    (tmp_path / "default").write_text("a\nb\n")
    with pytest.raises(DefaultModelError, match="expected one line with a model name, found 2"):
        read_default_file(tmp_path)

"""detect_quality_*: a request's detections counted per model and class, beside the manifest's baseline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from service_testkit import TOY_LABELS, add_toy_model, encode, solid_image
from v2_testkit import bytes_request, infer

from contract.manifest import Manifest
from contract.quality import MAX_CLASS_LABELS, OTHER_CLASS, QualityCounts, class_names
from service.runtime.quality_metrics import QualityMetrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _detect(client: TestClient, value: int, size: int = 64, **params: str) -> None:
    png = encode(solid_image(value, size, size))
    response = client.post("/detect", params=params, content=png, headers={"content-type": "image/png"})
    assert response.status_code == 200


def test_a_request_is_counted_per_model_and_class(client: TestClient) -> None:
    _detect(client, 200)  # toy scores 0.78, 0.71, 0.63: one cat, dog and bird above 0.05
    _detect(client, 200, 700, score_threshold="0.75", classes="cat")  # counted before the request's filters
    _detect(client, 10)  # scores 0.04, 0.035: nothing above the display threshold (0.05)
    values = samples(client.get("/metrics").text)
    toy = (("model", "toy"),)
    assert values[("detect_quality_images_total", toy)] == 3
    assert values[("detect_quality_no_detection_images_total", toy)] == 1
    for name in TOY_LABELS:
        labels = (("class", name), ("model", "toy"))
        assert values[("detect_quality_detections_per_image_count", labels)] == 3
        assert values[("detect_quality_detections_per_image_sum", labels)] == 2
        assert values[("detect_quality_detections_per_image_bucket", (*labels[:1], ("le", "0.0"), *toy))] == 1
        assert values[("detect_quality_score_count", labels)] == 2
    cat = (("class", "cat"), ("model", "toy"))
    assert abs(values[("detect_quality_score_sum", cat)] - 2 * 200 / 255) < 0.01
    assert values[("detect_quality_score_bucket", (("class", "cat"), ("le", "0.7"), *toy))] == 0
    assert values[("detect_quality_score_bucket", (("class", "cat"), ("le", "0.8"), *toy))] == 2
    side = "detect_quality_image_longer_side_pixels_bucket"
    assert values[(side, (("le", "160.0"), *toy))] == 2
    assert values[(side, (("le", "640.0"), *toy))] == 2
    assert values[(side, (("le", "800.0"), *toy))] == 3
    # no quality block in the toy manifest: no baseline series
    assert not any(name.startswith("detect_quality_baseline") and lbl == toy for name, lbl in values)


def test_the_baseline_is_exposed_from_the_manifest(
    make_client: Callable[..., TestClient], tmp_path: Path
) -> None:
    version_dir = add_toy_model(tmp_path, "toy")
    counts = QualityCounts(class_names(TOY_LABELS), 0.05)
    counts.add_image(np.array([0.9, 0.5, 0.01]), np.array([0, 0, 1]), 640, 480)
    counts.add_image(np.array([]), np.array([], dtype=np.int32), 640, 480)
    manifest = Manifest.read(version_dir)
    manifest.model_copy(update={"quality": counts.baseline("synth", "val", "cpu")}).write(version_dir)
    values = samples(make_client(tmp_path).get("/metrics").text)
    toy = (("model", "toy"),)
    assert values[("detect_quality_baseline_no_detection_share", toy)] == 0.5
    assert values[("detect_quality_baseline_detections_per_image", (("class", "cat"), *toy))] == 1.0
    assert values[("detect_quality_baseline_detections_per_image", (("class", "dog"), *toy))] == 0.0
    assert abs(values[("detect_quality_baseline_mean_score", (("class", "cat"), *toy))] - 0.7) < 1e-9
    assert ("detect_quality_baseline_mean_score", (("class", "dog"), *toy)) not in values


def test_class_labels_are_capped() -> None:
    labels = tuple(f"c{i}" for i in range(MAX_CLASS_LABELS + 20))
    names = class_names(labels)
    assert len(names) == MAX_CLASS_LABELS + 1 and names[-1] == OTHER_CLASS
    counts = QualityCounts(names, 0.3)
    counts.add_image(np.array([0.9, 0.8, 0.2]), np.array([MAX_CLASS_LABELS + 5, 3, 4]), 10, 10)
    assert counts.detections[-1] == 1 and counts.detections[3] == 1 and counts.detections.sum() == 2


def test_counts_restart_when_a_version_with_other_classes_loads() -> None:
    quality, registry = QualityMetrics(), CollectorRegistry()
    registry.register(quality)
    manifest = Manifest.read(Path(__file__).resolve().parents[3] / "models" / "ssd300-synth" / "1")
    quality.track("m", manifest)
    quality.observe("m", np.array([0.99]), np.array([0]), 10, 10)
    assert registry.get_sample_value("detect_quality_images_total", {"model": "m"}) == 1
    quality.track("m", manifest)  # same classes and threshold: counts go on
    assert registry.get_sample_value("detect_quality_images_total", {"model": "m"}) == 1
    quality.track("m", manifest.model_copy(update={"display_score_threshold": 0.99}))
    assert registry.get_sample_value("detect_quality_images_total", {"model": "m"}) == 0


def test_open_inference_protocol_encoded_images_are_counted(client: TestClient) -> None:
    request, packed = bytes_request([encode(solid_image(200)), encode(solid_image(10, 32, 48))])
    assert infer(client, "toy", request, packed).status_code == 200
    values = samples(client.get("/metrics").text)
    toy = (("model", "toy"),)
    assert values[("detect_quality_images_total", toy)] == 2
    assert values[("detect_quality_no_detection_images_total", toy)] == 1
    assert values[("detect_quality_detections_per_image_sum", (("class", "dog"), *toy))] == 1

"""The manifest's ``quality`` baseline: counted from the evaluation's served detections, recorded by
``detect-export eval --write``, in the counting the service's detect_quality_* metrics use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from service_testkit import PROJECT

from contract.manifest import Manifest
from contract.quality import QualityCounts, class_names
from exporters.cli import main
from exporters.evaluation.quality import ServedDetections
from exporters.evaluation.reports import record_display_threshold
from training.data.synthetic import generate_dataset

SSD300 = PROJECT / "models" / "ssd300-synth" / "1"
VAL_IMAGES = 6


@pytest.fixture(scope="module")
def small_val(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("val6")
    generate_dataset(root, 0, VAL_IMAGES, 0)
    return root


def _result(image_id: int, category_id: int, score: float) -> dict[str, Any]:
    return {"image_id": image_id, "category_id": category_id, "bbox": [0, 0, 1, 1], "score": score}


def test_served_detections_count_as_the_service_does() -> None:
    results = [_result(1, 7, 0.9), _result(1, 7, 0.2), _result(1, 3, 0.6), _result(3, 3, 0.1)]
    sizes = {1: (640, 480), 2: (100, 2000), 3: (50, 50)}
    served = ServedDetections.from_results(results, sizes, [3, 7], ("a", "b"), ("synth", "val", "cpu"))
    quality = served.quality(0.5)
    assert (quality.images, quality.no_detection_images, quality.display_threshold) == (3, 2, 0.5)
    assert quality.no_detection_share == pytest.approx(2 / 3)
    a, b = quality.classes
    assert (a.name, a.detections, b.name, b.detections) == ("a", 1, "b", 1)
    assert a.detections_per_image == pytest.approx(1 / 3) and b.mean_score == pytest.approx(0.9)
    assert sum(quality.longer_side_counts) == 3 and quality.longer_side_counts[-1] == 0
    # the same counts as the service's, image by image
    live = QualityCounts(class_names(("a", "b")), 0.5)
    live.add_image(np.array([0.9, 0.2, 0.6]), np.array([1, 1, 0]), 640, 480)
    live.add_image(np.array([]), np.array([], dtype=np.int64), 100, 2000)
    live.add_image(np.array([0.1]), np.array([0]), 50, 50)
    assert live.baseline("synth", "val", "cpu") == quality.model_copy(update={"measured_at": None})


def test_eval_write_records_the_quality_baseline(small_val: Path, tmp_path: Path) -> None:
    artifact = tmp_path / "ssd300-synth" / "1"
    artifact.mkdir(parents=True)
    (artifact / "model.onnx").symlink_to(SSD300 / "model.onnx")
    (artifact / "manifest.json").write_text((SSD300 / "manifest.json").read_text())
    before = Manifest.read(artifact)
    assert before.quality is None  # shipped manifests without the block still load
    assert main(["eval", "--artifact", str(artifact), "--data", str(small_val), "--write"]) == 0
    after = Manifest.read(artifact)
    quality = after.quality
    assert quality is not None and quality.images == VAL_IMAGES
    assert quality.display_threshold == before.default_threshold and quality.split == "val"
    assert [c.name for c in quality.classes] == [label.name for label in before.labels]
    assert quality.no_detection_share < 1.0  # a trained detector finds the synthetic shapes
    assert quality.no_detection_images == round(quality.no_detection_share * VAL_IMAGES)
    for cls in quality.classes:
        assert sum(cls.detections_per_image_counts) == VAL_IMAGES
        assert sum(cls.score_counts) == cls.detections
    assert sum(quality.longer_side_counts) == VAL_IMAGES
    # everything else is the manifest as it was, apart from the accuracy the command records
    fields = json.loads((artifact / "manifest.json").read_text())
    old = json.loads((SSD300 / "manifest.json").read_text())
    assert {k for k in fields if fields[k] != old.get(k)} == {"accuracy", "quality"}


def test_a_new_display_threshold_drops_a_baseline_counted_at_the_old_one(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text((SSD300 / "manifest.json").read_text())
    manifest = Manifest.read(tmp_path)
    counts = QualityCounts(class_names(tuple(label.name for label in manifest.labels)), 0.5)
    with_quality = manifest.model_copy(update={"quality": counts.baseline("synth", "val", "cpu")})
    record_display_threshold(with_quality, tmp_path, {"threshold": 0.5})
    assert Manifest.read(tmp_path).quality == with_quality.quality  # same threshold: kept
    record_display_threshold(with_quality, tmp_path, {"threshold": 0.6})
    assert Manifest.read(tmp_path).quality is None  # counted at another threshold: dropped

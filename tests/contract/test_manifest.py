"""The manifest schema's cross-field rules (contract/manifest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from service_testkit import PROJECT

from contract.manifest import Manifest
from contract.quality import QualityCounts, class_names

SSD300 = PROJECT / "models" / "ssd300-synth" / "1"


def test_unquantized_precision_is_for_int8_artifacts_only() -> None:
    fields = Manifest.read(SSD300).model_dump() | {"unquantized_precision": "bf16"}
    with pytest.raises(ValueError, match="unquantized_precision is for int8 artifacts; this one is fp32"):
        Manifest.model_validate(fields)
    assert Manifest.model_validate(fields | {"precision": "int8"}).unquantized_precision == "bf16"


def test_manifests_without_a_quality_block_load_unchanged() -> None:
    for path in sorted((PROJECT / "models").glob("*/*/manifest.json")):
        manifest = Manifest.read(path.parent)
        assert manifest.quality is None or manifest.quality.images > 0, path


def test_a_quality_block_round_trips_and_is_checked() -> None:
    counts = QualityCounts(class_names(("a", "b")), 0.4)
    counts.add_image(np.array([0.9, 0.3]), np.array([0, 1]), 640, 480)
    fields = Manifest.read(SSD300).model_dump() | {"quality": counts.baseline("synth", "val", "cpu")}
    manifest = Manifest.model_validate(fields)
    assert Manifest.model_validate_json(manifest.model_dump_json()) == manifest
    assert manifest.quality is not None and manifest.quality.classes[0].detections == 1
    bad = fields | {"quality": manifest.quality.model_dump() | {"no_detection_share": 1.5}}
    with pytest.raises(ValueError, match="no_detection_share"):
        Manifest.model_validate(bad)

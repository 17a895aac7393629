"""The manifests exports write: a derived artifact keeps its parent's contract and training provenance."""

from __future__ import annotations

import pydantic
import pytest
from exporters_testkit import ExportedArtifact

from contract.manifest import Manifest
from exporters.manifests import carried_settings, checkpoint_metrics, derived_manifest


def test_a_derived_manifest_keeps_the_contract_and_the_training_provenance(
    exported: ExportedArtifact,
) -> None:
    parent = Manifest.read(exported.directory)
    settings = {"command": "detect-export trt", **carried_settings(parent, ("raw_outputs", "absent"))}
    derived = derived_manifest(
        parent,
        name="tiny-trt",
        version="2",
        export_settings=settings,
        precision="fp16",
        file="model.fp16.onnx",
    )
    assert (derived.name, derived.version, derived.precision, derived.file) == (
        "tiny-trt",
        "2",
        "fp16",
        "model.fp16.onnx",
    )
    assert (derived.input, derived.outputs, derived.labels) == (parent.input, parent.outputs, parent.labels)
    assert derived.provenance.checkpoint_sha256 == parent.provenance.checkpoint_sha256
    assert derived.provenance.training_config == parent.provenance.training_config
    assert derived.provenance.export_settings == {
        "command": "detect-export trt",
        "raw_outputs": parent.provenance.export_settings["raw_outputs"],
    }
    assert derived.provenance.created_at and derived.provenance.tool_versions
    assert parent == Manifest.read(exported.directory)  # the parent is not changed


def test_a_derived_manifest_is_validated(exported: ExportedArtifact) -> None:
    parent = Manifest.read(exported.directory)
    with pytest.raises(pydantic.ValidationError):
        derived_manifest(parent, name="x", version="1", export_settings={}, max_batch_size=0)


def test_checkpoint_metrics_only_from_a_bbox_evaluation() -> None:
    assert checkpoint_metrics({"split": "val"}) == {}
    metrics = checkpoint_metrics({"bbox": {"AP": 0.25, "AP50": 0.5}, "split": "val", "epoch": 3})
    assert (metrics["coco_ap"], metrics["coco_ap50"], metrics["dataset"], metrics["epoch"]) == (
        0.25,
        0.5,
        "val",
        3,
    )

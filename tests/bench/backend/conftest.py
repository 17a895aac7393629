"""Session fixtures: a tiny real SSD300 checkpoint and one exported artifact to benchmark (builders:
``exporters_testkit``, ``detectors_testkit``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from detectors_testkit import make_checkpoint
from exporters_testkit import ExportedArtifact

from exporters.checkpoint_export import OnnxExportRequest, export_onnx


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "checkpoint.pt")


@pytest.fixture(scope="session")
def exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ExportedArtifact:
    """The checkpoint exported once (with verification) to ``models/tiny/1``; tests must not modify it."""
    directory = tmp_path_factory.mktemp("repo") / "models" / "tiny" / "1"
    manifest = export_onnx(OnnxExportRequest(checkpoint=tiny_checkpoint, output=directory))
    return ExportedArtifact(tiny_checkpoint, directory, manifest)

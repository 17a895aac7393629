"""Session fixtures: a tiny real SSD300 checkpoint, a synthetic dataset, and one exported artifact.

Builders live in ``exporters_testkit`` (registered here so test modules can import it under
``--import-mode=importlib``, which puts no test folder on sys.path).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _register_testkit() -> None:
    if "exporters_testkit" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        "exporters_testkit", Path(__file__).with_name("exporters_testkit.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["exporters_testkit"] = module
    spec.loader.exec_module(module)


_register_testkit()

from exporters_testkit import ExportedArtifact, make_checkpoint  # noqa: E402

from exporters.onnx_export import OnnxExportRequest, export_onnx  # noqa: E402
from training.data.synthetic import SyntheticConfig, generate_dataset  # noqa: E402


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "checkpoint.pt")


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 small validation images in the COCO layout (no training split needed)."""
    root = tmp_path_factory.mktemp("synthetic")
    generate_dataset(root, num_train=0, num_val=4, seed=5, config=SyntheticConfig(side_range=(120, 200)))
    return root


@pytest.fixture(scope="session")
def exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ExportedArtifact:
    """The checkpoint exported once (with verification) to ``models/tiny/1``; tests must not modify it."""
    directory = tmp_path_factory.mktemp("repo") / "models" / "tiny" / "1"
    manifest = export_onnx(OnnxExportRequest(checkpoint=tiny_checkpoint, output=directory))
    return ExportedArtifact(tiny_checkpoint, directory, manifest)

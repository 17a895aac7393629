"""Fixtures every test package shares, made once per session when first asked for: small synthetic
COCO-layout datasets, and a tiny real SSD300 checkpoint with one exported artifact (builders:
``detectors_testkit``, ``exporters_testkit``; used by tests/exporters and tests/bench/backend)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import pytest

from training.data.synthetic import SyntheticConfig, generate_dataset

if TYPE_CHECKING:
    from exporters_testkit import ExportedArtifact

NUM_TRAIN = 10
NUM_VAL = 4
SEED = 7


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The generator's summary of a dataset written once for the whole session (treat as read-only)."""
    return generate_dataset(tmp_path_factory.mktemp("synthetic"), NUM_TRAIN, NUM_VAL, seed=SEED)


@pytest.fixture(scope="session")
def tiny_coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic COCO-format dataset (8 train / 4 val images, small sides) shared by the session."""
    root = tmp_path_factory.mktemp("tiny_coco")
    generate_dataset(root, num_train=8, num_val=4, seed=3, config=SyntheticConfig(side_range=(96, 160)))
    return root


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 small validation images in the COCO layout (no training split needed)."""
    root = tmp_path_factory.mktemp("synthetic")
    generate_dataset(root, num_train=0, num_val=4, seed=5, config=SyntheticConfig(side_range=(120, 200)))
    return root


@pytest.fixture(scope="session")
def synthetic_root(synthetic: dict[str, Any]) -> Path:
    return Path(synthetic["root"])


def _write_coco2017(root: Path) -> None:
    """A COCO-2017-named layout: train2017/ + annotations/instances_train2017.json, with awkward records."""
    (root / "train2017").mkdir(parents=True)
    (root / "annotations").mkdir()
    rng = np.random.default_rng(0)
    for name, (h, w) in {
        "000000000009.jpg": (40, 60),
        "000000000025.jpg": (50, 30),
        "000000000030.jpg": (20, 20),
    }.items():
        cv2.imwrite(str(root / "train2017" / name), rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
    seg = [[10.0, 5.0, 30.0, 5.0, 30.0, 25.0, 10.0, 25.0]]
    data = {
        "info": {},
        "licenses": [],
        "images": [
            {"id": 25, "file_name": "000000000025.jpg", "height": 50, "width": 30},
            {"id": 9, "file_name": "000000000009.jpg", "height": 40, "width": 60},
            {"id": 30, "file_name": "000000000030.jpg", "height": 20, "width": 20},
        ],
        "annotations": [
            {
                "id": 1,
                "image_id": 9,
                "category_id": 90,
                "bbox": [10.0, 5.0, 20.0, 20.0],
                "area": 400.0,
                "segmentation": seg,
                "iscrowd": 0,
            },
            {
                "id": 2,
                "image_id": 9,
                "category_id": 1,
                "bbox": [50.0, 30.0, 20.0, 20.0],
                "area": 400.0,
                "segmentation": seg,
                "iscrowd": 0,
            },  # sticks out of the image: clipped
            {
                "id": 3,
                "image_id": 9,
                "category_id": 1,
                "bbox": [0.0, 0.0, 60.0, 40.0],
                "area": 2400.0,
                "segmentation": {"counts": [0, 2400], "size": [40, 60]},
                "iscrowd": 1,
            },  # crowd: skipped
            {
                "id": 4,
                "image_id": 25,
                "category_id": 1,
                "bbox": [3.0, 3.0, 0.0, 10.0],
                "area": 0.0,
                "segmentation": [],
                "iscrowd": 0,
            },  # degenerate: skipped, image 25 becomes empty
        ],
        # COCO's own order: sorted by id with gaps.
        "categories": [
            {"id": 1, "name": "person", "supercategory": "person"},
            {"id": 90, "name": "toothbrush", "supercategory": "indoor"},
        ],
    }
    (root / "annotations" / "instances_train2017.json").write_text(json.dumps(data))


@pytest.fixture
def coco2017(tmp_path: Path) -> Path:
    """A COCO-2017-named layout (train2017 only) with crowd, degenerate and out-of-image boxes."""
    _write_coco2017(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from detectors_testkit import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "checkpoint.pt")


@pytest.fixture(scope="session")
def exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ExportedArtifact:
    """The checkpoint exported once (with verification) to ``models/tiny/1``; tests must not modify it."""
    from exporters_testkit import ExportedArtifact

    from exporters.checkpoint_export import OnnxExportRequest, export_onnx

    directory = tmp_path_factory.mktemp("repo") / "models" / "tiny" / "1"
    manifest = export_onnx(OnnxExportRequest(checkpoint=tiny_checkpoint, output=directory))
    return ExportedArtifact(tiny_checkpoint, directory, manifest)

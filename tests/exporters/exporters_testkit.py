"""Builders shared by the exporters tests (imported as ``exporters_testkit``, registered by conftest).

The checkpoint is a ResNet-18 SSD300 with 3 classes and random weights. Its class-head weights are
scaled down so the softmax scores spread over (0, 1) instead of piling up near 1: every class then
passes the 0.05 threshold at thousands of anchors (so the per-class top-k, NMS and the cut at K are all
exercised) and scores are distinct enough to compare row by row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from service.manifest import Manifest
from training.checkpoint import Checkpoint, save_checkpoint
from training.detectors.ssd300.model import SSD300

# COCO ids of the synthetic generator's first three categories, so --data runs work on it.
CATEGORIES = [{"id": 2, "name": "circle"}, {"id": 5, "name": "square"}, {"id": 11, "name": "triangle"}]
CHECKPOINT_METRICS = {"bbox": {"AP": 0.125, "AP50": 0.25}, "split": "val", "epoch": 3}


def make_checkpoint(path: Path, seed: int = 0, conf_scale: float = 0.3) -> Path:
    torch.manual_seed(seed)
    model = SSD300(num_classes=len(CATEGORIES), backbone="resnet18").eval()
    with torch.no_grad():
        for head in model.conf:
            head.weight.mul_(conf_scale)
    ckpt = Checkpoint(
        model_name="ssd300",
        model_args={"num_classes": len(CATEGORIES), "backbone": "resnet18"},
        categories=CATEGORIES,
        model=model.state_dict(),
        config={"lr": 0.01, "note": "exporters test checkpoint"},
        epoch=3,
        iteration=42,
        metrics=CHECKPOINT_METRICS,
    )
    return save_checkpoint(ckpt, path)


@dataclass(frozen=True)
class ExportedArtifact:
    checkpoint: Path
    directory: Path
    manifest: Manifest

    @property
    def model_path(self) -> Path:
        return self.directory / self.manifest.file


def copy_artifact(artifact: ExportedArtifact, destination: Path) -> Path:
    """A private copy of an artifact folder (tests that write manifests must not touch the shared one)."""
    import shutil

    target = destination / "models" / artifact.manifest.name / artifact.manifest.version
    shutil.copytree(artifact.directory, target)
    return target


def make_ssd320_checkpoint(path: Path, image_size: int = 96, seed: int = 0) -> Path:
    """A ResNet-18 SSD320 with 3 classes at ``image_size`` and random weights, its sigmoid scores spread
    over (0, 1) (class-predictor weights scaled up, bias -1) so classes, top-k and NMS all decide."""
    from training.detectors.ssd320.model import SSD320

    torch.manual_seed(seed)
    args = {
        "num_classes": len(CATEGORIES),
        "backbone": "resnet18",
        "image_size": image_size,
        "freeze_bn": False,
    }
    model = SSD320(**args).eval()
    with torch.no_grad():
        model.head.class_predictor.weight.mul_(40.0)
        model.head.class_predictor.bias.fill_(-1.0)
        model.head.box_predictor.weight.mul_(10.0)
    ckpt = Checkpoint(
        model_name="ssd320",
        model_args=args,
        categories=CATEGORIES,
        model=model.state_dict(),
        config={"note": "ssd320 exporters test checkpoint"},
        epoch=1,
        iteration=7,
    )
    return save_checkpoint(ckpt, path)

"""NVIDIA's SSD300 v1.1 files (``{"model": state_dict, "label_map": {label: name}, ...}``, keys optionally
prefixed with ``module.``) as ``ssd300`` checkpoints, with the backbone inferred from the weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from training.checkpoint import Checkpoint, CheckpointError
from training.data.coco_categories import COCO_2017_CATEGORIES


def _strip_module_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("module."): v for k, v in state.items()}


def _nvidia_backbone(state: dict[str, torch.Tensor]) -> str:
    layer3 = "feature_extractor.feature_extractor.6."
    blocks = {int(k[len(layer3) :].split(".")[0]) for k in state if k.startswith(layer3)}
    bottleneck = f"{layer3}0.conv3.weight" in state
    by_depth = {(False, 2): "resnet18", (False, 6): "resnet34", (True, 6): "resnet50"}
    by_depth |= {(True, 23): "resnet101", (True, 36): "resnet152"}
    try:
        return by_depth[(bottleneck, len(blocks))]
    except KeyError:
        raise CheckpointError(f"unrecognised SSD300 backbone: layer3 has {len(blocks)} blocks") from None


def nvidia_ssd300_checkpoint(raw: dict[str, Any], path: Path) -> Checkpoint | None:
    """NVIDIA's SSD300 v1.1 file in ``raw`` as an ``ssd300`` checkpoint, or None if not that layout."""
    if not isinstance(raw.get("model"), dict) or not any(
        k.removeprefix("module.").startswith("feature_extractor.feature_extractor.") for k in raw["model"]
    ):
        return None
    state = _strip_module_prefix(raw["model"])
    try:
        conf0 = state["conf.0.weight"]
    except KeyError:
        raise CheckpointError(f"{path}: SSD300 state dict without conf.0.weight") from None
    num_classes = conf0.shape[0] // 4 - 1  # first level has 4 default boxes per location
    if num_classes == len(COCO_2017_CATEGORIES):
        categories = [{"id": cid, "name": name} for cid, name in COCO_2017_CATEGORIES]
    else:
        names = raw.get("label_map") or {}
        categories = [{"id": i, "name": str(names.get(i, f"class_{i}"))} for i in range(1, num_classes + 1)]
    return Checkpoint(
        model_name="ssd300",
        model_args={"num_classes": num_classes, "backbone": _nvidia_backbone(state)},
        categories=categories,
        model=state,
        epoch=int(raw.get("epoch", 0) or 0),
        iteration=int(raw.get("iteration", 0) or 0),
        source="nvidia-ssd300",
    )

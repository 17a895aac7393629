"""Checkpoints that describe themselves, and loading of NVIDIA's published SSD300 layout.

A checkpoint written here is a dict::

    {"format": "detect-checkpoint/1", "model_name": "ssd300", "model_args": {...},
     "categories": [{"id": <COCO category id>, "name": ...}, ...],   # contiguous label i + 1 -> entry i
     "config": {... training config ...}, "epoch": int, "iteration": int,
     "model": state_dict, "optimizer": ..., "scheduler": ..., "scaler": ..., "metrics": {...},
     "model_ema": state_dict or None}   # exponential moving average of the weights, when trained with one

NVIDIA's SSD300 v1.1 files (``{"model": state_dict, "label_map": {label: name}, ...}``, keys optionally
prefixed with ``module.``) load as an ``ssd300`` checkpoint with the backbone inferred from the weights.
EfficientDet-D0 weight files of effdet and NVIDIA's PyTorch EfficientDet load as ``efficientdet-d0``
checkpoints (see ``training.detectors.efficientdet.checkpoints``). torchvision's Mask R-CNN files (v1/v2 COCO
weights, or its reference scripts' ``{"model": ...}``) load as ``maskrcnn_resnet50_fpn[_v2]`` checkpoints
(see ``training.detectors.maskrcnn.weights``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training.data.coco_categories import COCO_2017_CATEGORIES
from training.detectors.registry import build_model

FORMAT = "detect-checkpoint/1"


class CheckpointError(ValueError):
    """The file is missing, unreadable, or not a checkpoint this project understands."""


@dataclass
class Checkpoint:
    model_name: str
    model_args: dict[str, Any]
    categories: list[dict[str, Any]]
    model: dict[str, torch.Tensor]
    config: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    iteration: int = 0
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    scaler: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    source: str = "detect"
    # EMA of the weights (``TrainConfig.ema_decay``); ``model`` stays the raw weights training resumes from.
    model_ema: dict[str, torch.Tensor] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model_name": self.model_name,
            "model_args": self.model_args,
            "categories": self.categories,
            "config": self.config,
            "epoch": self.epoch,
            "iteration": self.iteration,
            "model": self.model,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "scaler": self.scaler,
            "metrics": self.metrics,
            "model_ema": self.model_ema,
        }

    @property
    def inference_weights(self) -> dict[str, torch.Tensor]:
        """The weights to evaluate, export and serve: the EMA copy when there is one."""
        return self.model_ema if self.model_ema is not None else self.model

    def build(self) -> nn.Module:
        """The model with :attr:`inference_weights` loaded strictly (no missing or unexpected keys)."""
        model = build_model(self.model_name, **self.model_args)
        model.load_state_dict(self.inference_weights, strict=True)
        return model


def save_checkpoint(ckpt: Checkpoint, path: str | Path) -> Path:
    """Write atomically (temp file + rename) so an interrupted save never leaves a corrupt checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(ckpt.to_dict(), tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_checkpoint(path: str | Path) -> Checkpoint:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} holds a {type(raw).__name__}, not a checkpoint dict")
    if raw.get("format") == FORMAT:
        return Checkpoint(
            model_name=raw["model_name"],
            model_args=dict(raw["model_args"]),
            categories=list(raw["categories"]),
            model=raw["model"],
            config=raw.get("config") or {},
            epoch=int(raw.get("epoch", 0)),
            iteration=int(raw.get("iteration", 0)),
            optimizer=raw.get("optimizer"),
            scheduler=raw.get("scheduler"),
            scaler=raw.get("scaler"),
            metrics=raw.get("metrics") or {},
            model_ema=raw.get("model_ema"),
        )
    if isinstance(raw.get("model"), dict) and any(
        k.removeprefix("module.").startswith("feature_extractor.feature_extractor.") for k in raw["model"]
    ):
        return _from_nvidia_ssd300(raw, path)
    from training.detectors.maskrcnn.weights import checkpoint_fields, is_torchvision_maskrcnn

    nested = raw.get("model")
    if is_torchvision_maskrcnn(nested if isinstance(nested, dict) else raw):
        return Checkpoint(**checkpoint_fields(raw), source="torchvision-maskrcnn")
    from training.detectors.efficientdet.checkpoints import efficientdet_checkpoint

    effdet = efficientdet_checkpoint(raw, path)
    if effdet is not None:
        return effdet
    raise CheckpointError(
        f"{path} is neither a {FORMAT} checkpoint nor NVIDIA's SSD300 layout nor an EfficientDet-D0 "
        f"or torchvision Mask R-CNN state dict (top-level keys: {sorted(raw)[:8]})"
    )


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


def _from_nvidia_ssd300(raw: dict[str, Any], path: Path) -> Checkpoint:
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

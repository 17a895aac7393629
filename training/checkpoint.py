"""The checkpoint record: what a checkpoint file holds, and writing one.

A checkpoint written here is a dict::

    {"format": "detect-checkpoint/1", "model_name": "ssd300", "model_args": {...},
     "categories": [{"id": <COCO category id>, "name": ...}, ...],   # contiguous label i + 1 -> entry i
     "config": {... training config ...}, "epoch": int, "iteration": int,
     "model": state_dict, "optimizer": ..., "scheduler": ..., "scaler": ..., "metrics": {...},
     "model_ema": state_dict or None}   # exponential moving average of the weights, when trained with one

This module is the bottom of training's checkpoint handling: the architectures' weight readers and export
wrappers build on the record, and `training.weights` builds on them (reading any weights file, this
format or another project's, and building the model a checkpoint describes).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

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

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Checkpoint:
        """The record of a dict in this format (``raw["format"] == FORMAT``), as :meth:`to_dict` writes it."""
        return cls(
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

"""Any weights file as a `Checkpoint`, and the model a checkpoint describes.

This sits above the architecture registry (``training.detectors.registry``), which sits above the
checkpoint record (``training.checkpoint``): a file in this project's format is read as it is written;
other projects' published weight files load through the readers their architecture registers: NVIDIA's
SSD300 v1.1 files as ``ssd300`` (``training.detectors.ssd300.weights``), torchvision's Mask R-CNN files as
``maskrcnn_resnet50_fpn[_v2]`` (``training.detectors.maskrcnn.weights``), effdet's and NVIDIA's
EfficientDet-D0 files as ``efficientdet-d0`` (``training.detectors.efficientdet.checkpoints``).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from torch import nn

from training.checkpoint import FORMAT, Checkpoint, CheckpointError
from training.config import make_config
from training.data.synthetic import CATEGORIES
from training.detectors.registry import build_model, weight_readers


def load_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint in ``path``: this project's format, or a weights file an architecture's reader
    recognises. Raises `CheckpointError` when the file is missing, unreadable or neither."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        # weights_only: tensors and plain containers only, so a crafted pickle cannot run code on load.
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise _unpickling_error(path, exc) from exc
    except Exception as exc:  # torch raises many types for a corrupt file
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} holds a {type(raw).__name__}, not a checkpoint dict")
    if raw.get("format") == FORMAT:
        return Checkpoint.from_dict(raw)
    for reader in weight_readers():
        ckpt = reader(raw, path)
        if ckpt is not None:
            return ckpt
    raise CheckpointError(
        f"{path} is neither a {FORMAT} checkpoint nor NVIDIA's SSD300 layout nor an EfficientDet-D0 "
        f"or torchvision Mask R-CNN state dict (top-level keys: {sorted(raw)[:8]})"
    )


def _unpickling_error(path: Path, exc: pickle.UnpicklingError) -> CheckpointError:
    """A file the weights-only unpickler stops at: one that asks for a global (a class or function it
    would call: refused, it could run code), or one that is not a pickle of weights at all (corrupt)."""
    text = str(exc)
    lines = text.splitlines() or [type(exc).__name__]
    reason = next((line.strip() for line in lines if "Unsupported" in line), lines[0])
    reason = reason.removeprefix("WeightsUnpickler error: ")
    if "Unsupported global" in text:
        return CheckpointError(
            f"refused to load {path}: it holds more than weights (tensors, numbers, strings and plain "
            f"containers), and loading it could run code ({reason.split('. Please use')[0]})"
        )
    return CheckpointError(f"cannot read checkpoint {path}: not a weights file ({reason})")


def build_checkpoint_model(checkpoint: Checkpoint) -> nn.Module:
    """The model ``checkpoint`` describes, with its `Checkpoint.inference_weights` loaded strictly (no
    missing or unexpected keys)."""
    model = build_model(checkpoint.model_name, **checkpoint.model_args)
    model.load_state_dict(checkpoint.inference_weights, strict=True)
    return model


def untrained_checkpoint(preset: str, seed: int = 0) -> Checkpoint:
    """A checkpoint of ``preset``'s architecture and arguments for the synthetic dataset's classes, its
    weights freshly initialized (``seed``): for timing and sizing, where the weights do not matter."""
    cfg = make_config(preset)
    categories = [{"id": coco_id, "name": name} for coco_id, name in CATEGORIES]
    model_args = {"num_classes": len(categories), "backbone": cfg.backbone, **cfg.model_args}
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        model = build_model(cfg.model, **model_args).eval()
    return Checkpoint(cfg.model, model_args, categories, model.state_dict(), config={"preset": preset})

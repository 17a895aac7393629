"""Training configuration: plain values, named presets, command-line overrides (nanoGPT-style)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class TrainConfig:
    model: str = "ssd300"
    backbone: str = "resnet50"
    backbone_weights: str | None = None  # a torchvision ImageNet state_dict file; never downloaded
    data: str | None = None
    train_split: str | None = None  # default: train2017 if present, else train
    val_split: str | None = None  # default: val2017 if present, else val
    output: str = "runs/ssd300"
    epochs: int = 65
    max_iters: int | None = None  # stop early after this many iterations (smoke runs, tests)
    batch_size: int = 32  # per process
    # LR = base_lr x world_size x batch_size / 32 (NVIDIA's rule)
    base_lr: float = 2.6e-3
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: Literal["multistep", "cosine"] = "multistep"
    milestones: list[int] = field(default_factory=lambda: [43, 54])  # epochs
    warmup_iters: int = 300
    warmup_factor: float = 0.0
    pipeline: Literal["dali", "torch"] = "dali"
    workers: int = 4
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    channels_last: bool = True
    eval_every: int = 5  # epochs; the last epoch is always evaluated
    eval_batch_size: int = 32
    log_interval: int = 20
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    resume: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # NVIDIA's SSD300 v1.1 recipe for COCO 2017 on GPUs (AMP, DALI, 65 epochs, multistep at 43 and 54).
    "ssd300-coco": {},
    # From scratch on the synthetic dataset on a 2-core CPU: ResNet-18, bf16 autocast, cosine decay.
    "ssd300-cpu-small": {
        "backbone": "resnet18",
        "output": "runs/ssd300-cpu-small",
        "epochs": 22,
        "batch_size": 16,
        "base_lr": 0.2,  # peak LR 0.1 at batch 16: from scratch, BatchNorm everywhere but the heads
        "weight_decay": 5e-4,
        "schedule": "cosine",
        "warmup_iters": 100,
        "warmup_factor": 0.1,
        "pipeline": "torch",
        "workers": 2,
        "precision": "bf16",
        "eval_every": 4,
        "eval_batch_size": 16,
        "log_interval": 10,
    },
}


def make_config(preset: str | None = None, **overrides: Any) -> TrainConfig:
    """Defaults, then the preset's values, then explicit overrides (``None`` means 'not given')."""
    values: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
        values.update(PRESETS[preset])
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown config keys: {unknown}")
    return TrainConfig(**values)

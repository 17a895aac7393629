"""Training configuration: plain values, named presets, command-line overrides (nanoGPT-style)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from training.detectors.registry import presets


@dataclass
class TrainConfig:
    model: str = "ssd300"
    backbone: str = "resnet50"
    backbone_weights: str | None = None  # a torchvision ImageNet state_dict file; never downloaded
    # The whole model's initial weights (a checkpoint, or a published file load_checkpoint reads), strict.
    weights: str | None = None
    # Further builder arguments of the architecture (e.g. ssd320's image_size, freeze_bn); stored in the
    # checkpoint's model_args next to num_classes and backbone.
    model_args: dict[str, Any] = field(default_factory=dict)
    data: str | None = None
    train_split: str | None = None  # default: train2017 if present, else train
    val_split: str | None = None  # default: val2017 if present, else val
    output: str = "runs/ssd300"
    epochs: int = 65
    max_iters: int | None = None  # stop after this many iterations (step-based recipes, smoke runs, tests)
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
    # Exponential moving average of the weights, updated every step (e.g. 0.9998; None = off). When on,
    # evaluation uses the average and checkpoints carry it (``model_ema``) for evaluation and export.
    ema_decay: float | None = None
    # Clip the global gradient L2 norm to this value before each step (None = off); TF EfficientDet's 10.0.
    clip_grad_norm: float | None = None
    # EfficientDet's random scale range [low, high] of the train-time resize (None: TF's 0.1-2.0).
    scale_jitter: list[float] | None = None
    # Fine-tuning (training.data.finetune): a reviewed captured dataset's root (its ``finetune_split`` is
    # read), mixed into ``data``'s train split so that ``mix_ratio`` of the images are reviewed ones.
    finetune_data: str | None = None
    finetune_split: str = "captured"
    mix_ratio: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Every architecture's presets (``training/detectors/<name>/presets.py``), keyed by preset name.
PRESETS: dict[str, dict[str, Any]] = presets()


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

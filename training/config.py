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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # NVIDIA's SSD300 v1.1 recipe for COCO 2017 on GPUs (AMP, DALI, 65 epochs, multistep at 43 and 54).
    "ssd300-coco": {},
    # From scratch on the synthetic dataset on a 2-core CPU: ResNet-18, bf16 autocast, cosine decay over
    # 40 epochs (5000 iterations on 2000 images): the budget the default model trained for (AP 0.52).
    "ssd300-cpu-small": {
        "backbone": "resnet18",
        "output": "runs/ssd300-cpu-small",
        "epochs": 40,
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
    # NVIDIA's SSD320 v1.2 recipe (TF ssd320_full_8gpus.config) for COCO 2017 on 8 GPUs x 32 images:
    # 12,500 steps (~27.3 epochs of 458 steps), cosine decay from 0.16 with linear warmup from 0.0693312
    # over 1000 steps, momentum 0.9, L2 4e-4, BatchNorm frozen, ResNet-50 from ImageNet weights
    # (--backbone-weights); flip + random crop. LR = base_lr x 8 GPUs x 32 / 32 = 0.16.
    "ssd320-coco": {
        "model": "ssd320",
        "backbone": "resnet50",
        "model_args": {"image_size": 320, "freeze_bn": True},
        "output": "runs/ssd320-coco",
        "epochs": 28,
        "max_iters": 12500,
        "batch_size": 32,
        "base_lr": 0.02,
        "momentum": 0.9,
        "weight_decay": 4e-4,
        "schedule": "cosine",
        "warmup_iters": 1000,
        "warmup_factor": 0.0693312 / 0.16,
        "pipeline": "dali",
        "workers": 8,
        "eval_every": 7,
        "eval_batch_size": 32,
        "log_interval": 50,
    },
    # From scratch on the synthetic dataset on a 2-core CPU: ResNet-18 at 256x256 (anchors laid out for
    # 256: 8,184), BatchNorm trained (frozen statistics need ImageNet weights), bf16 autocast. 28 epochs
    # (3,500 steps of 16 images) is what the README's run trained for; it passed AP 0.5 at epoch 16.
    "ssd320-cpu-small": {
        "model": "ssd320",
        "backbone": "resnet18",
        "model_args": {"image_size": 256, "freeze_bn": False},
        "output": "runs/ssd320-cpu-small",
        "epochs": 28,
        "batch_size": 16,
        "base_lr": 0.1,  # peak LR 0.05 at batch 16
        "weight_decay": 4e-4,
        "schedule": "cosine",
        "warmup_iters": 200,
        "warmup_factor": 0.1,
        "pipeline": "torch",
        "workers": 2,
        "precision": "bf16",
        "eval_every": 4,
        "eval_batch_size": 16,
        "log_interval": 10,
    },
    # The TF EfficientDet-D0 recipe (google/automl, which effdet and NVIDIA follow) for COCO 2017 on
    # 8 GPUs x 16 images: 300 epochs, SGD momentum 0.9, LR 0.08 per 64 images (base_lr 0.04 per 32 ->
    # 0.16 at 128) with a 1-epoch linear warmup from 10%, cosine decay, weight decay 4e-5 (not on
    # BatchNorm and biases), gradient norm clipped to 10, EMA 0.9998, AMP, DALI, scale jitter 0.1-2.0 +
    # flip at 512. The backbone starts from ImageNet weights given with --backbone-weights (timm
    # tf_efficientnet_b0 file).
    "efficientdet-d0-coco": {
        "model": "efficientdet-d0",
        "backbone": "tf_efficientnet_b0",
        "model_args": {"image_size": 512},
        "output": "runs/efficientdet-d0-coco",
        "epochs": 300,
        "batch_size": 16,
        "base_lr": 0.04,
        "momentum": 0.9,
        "weight_decay": 4e-5,
        "schedule": "cosine",
        "warmup_iters": 917,  # one epoch of COCO train2017 (117,266 images) at 8 x 16
        "warmup_factor": 0.1,
        "pipeline": "dali",
        "workers": 8,
        "ema_decay": 0.9998,
        "clip_grad_norm": 10.0,
        "eval_every": 10,
        "eval_batch_size": 32,
        "log_interval": 50,
    },
    # From scratch on the synthetic dataset on a 2-core CPU: the PyTorch-padding D0 variant (cheaper than
    # TF "SAME" padding on the CPU) letterboxed to 256 (anchors follow: 12,276), bf16 autocast, EMA.
    # From random weights the first steps' gradient norms are 47-171: unclipped, with the recipe's weight
    # decay of 4e-5, they and the high LR grew the BatchNorm'd conv weights 4x in 30 steps and 13x by step
    # 1,375, shrinking the effective step until the loss stalled near 0.96 (AP 0.004 after 10 epochs).
    # Hence the clipping, weight decay 4e-4 and a lower peak LR here. With those and TF's 0.1-2.0 scale
    # jitter, 36 epochs reached AP 0.163: at 256 the jitter spends much of a short run on objects of a few
    # pixels or cropped; 0.5-1.5 keeps them near the validation sizes (44-219 px): AP 0.372 after 30 epochs
    # and 0.604 after 60 (the README's run: 30, then resumed to 60 on a re-fitted cosine).
    "efficientdet-d0-cpu-small": {
        "model": "efficientdet-d0",
        "backbone": "efficientnet_b0",
        "model_args": {"image_size": 256},
        "output": "runs/efficientdet-d0-cpu-small",
        "epochs": 60,
        "batch_size": 16,
        "base_lr": 0.1,  # peak LR 0.05 at batch 16
        "momentum": 0.9,
        "weight_decay": 4e-4,
        "schedule": "cosine",
        "warmup_iters": 250,
        "warmup_factor": 0.1,
        "pipeline": "torch",
        "workers": 2,
        "precision": "bf16",
        "ema_decay": 0.9998,
        "clip_grad_norm": 10.0,
        "scale_jitter": [0.5, 1.5],
        "eval_every": 4,
        "eval_batch_size": 16,
        "log_interval": 10,
    },
    # torchvision's reference recipe for Mask R-CNN R50-FPN on COCO 2017 (references/detection, 8 GPUs x
    # 2 images): SGD 0.02 for 16 images, momentum 0.9, weight decay 1e-4, 26 epochs with x0.1 at 16 and
    # 22, linear warmup over 1000 iterations from 0.001; FrozenBatchNorm ResNet-50 from ImageNet weights
    # (--backbone-weights) with 3 trainable stages. Geometry: letterboxed to 1088 (a 4:3 image becomes
    # 1088 x 816, torchvision's 800/1333 resize within 2%), flip + 0.8-1.2 scale jitter.
    "maskrcnn-coco": {
        "model": "maskrcnn_resnet50_fpn",
        "backbone": "resnet50",
        "model_args": {"image_size": 1088, "norm": "frozen", "trainable_backbone_layers": 3},
        "output": "runs/maskrcnn-coco",
        "epochs": 26,
        "milestones": [16, 22],
        "batch_size": 2,
        "base_lr": 0.04,  # LR = 0.04 x world x batch / 32 = 0.02 at 8 GPUs x 2 images
        "momentum": 0.9,
        "weight_decay": 1e-4,
        "schedule": "multistep",
        "warmup_iters": 1000,
        "warmup_factor": 0.001,
        "pipeline": "torch",
        "workers": 4,
        "eval_every": 2,
        "eval_batch_size": 4,
        "log_interval": 20,
    },
    # From scratch on the synthetic dataset on a 2-core CPU: the same detector (FPN, RPN, box and mask
    # heads) on a ResNet-18 letterboxed to 256 (as the SSD320 CPU preset), BatchNorm trained (frozen
    # statistics need ImageNet weights), fewer RPN proposals and sampled RoIs (a few large objects per
    # image), gradient norm clipped (from random weights), bf16 autocast + channels-last (fp32 is half as
    # fast). One thread at batch 4 on a shared machine: R50 at 320 trained at 0.45 img/s, this at 1.2.
    # Box / mask AP 0.658 / 0.641 after 10 epochs (the README's run: 5 epochs of a 12-epoch cosine, then
    # resumed to 10 on a re-fitted one).
    "maskrcnn-cpu-small": {
        "model": "maskrcnn_resnet50_fpn",
        "backbone": "resnet18",
        "model_args": {
            "image_size": 256,
            "rpn_pre_nms_top_n_train": 600,
            "rpn_post_nms_top_n_train": 300,
            "rpn_pre_nms_top_n_test": 500,
            "rpn_post_nms_top_n_test": 300,
            "box_batch_size_per_image": 64,
        },
        "output": "runs/maskrcnn-cpu-small",
        "epochs": 10,
        "batch_size": 8,
        "base_lr": 0.08,  # peak LR 0.02 at batch 8
        "momentum": 0.9,
        "weight_decay": 1e-4,
        "schedule": "cosine",
        "warmup_iters": 250,
        "warmup_factor": 0.01,
        "pipeline": "torch",
        "workers": 2,
        "precision": "bf16",
        "clip_grad_norm": 10.0,
        "eval_every": 2,
        "eval_batch_size": 8,
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

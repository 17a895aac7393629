"""SSD320's named training recipes (``detect-train --preset``), over ``TrainConfig``'s defaults."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
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
}

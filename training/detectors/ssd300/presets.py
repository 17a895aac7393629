"""SSD300's named training recipes (``detect-train --preset``), over ``TrainConfig``'s defaults."""

from __future__ import annotations

from typing import Any

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
}

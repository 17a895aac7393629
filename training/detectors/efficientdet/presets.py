"""EfficientDet-D0's named training recipes (``detect-train --preset``), over ``TrainConfig``'s defaults."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
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
}

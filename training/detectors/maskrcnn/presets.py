"""Mask R-CNN's named training recipes (``detect-train --preset``), over ``TrainConfig``'s defaults."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
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
    # resumed to 10 on a re-fitted one), with torchvision's 1024-wide box head. The box head is 256 wide
    # since (20.3 M parameters instead of 30.9 M; 256 x 7 x 7 RoI features for six classes): INT8 keeps
    # the RoI heads fp32, and at 1024 they alone would be ~28 MB of the shipped INT8 artifact.
    "maskrcnn-cpu-small": {
        "model": "maskrcnn_resnet50_fpn",
        "backbone": "resnet18",
        "model_args": {
            "image_size": 256,
            "box_representation_size": 256,
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

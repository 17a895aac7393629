"""SGD with weight decay off for 1-D parameters (BatchNorm and biases), and per-iteration LR schedules."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, object]]:
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if param.dim() <= 1 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_sgd(model: nn.Module, lr: float, momentum: float, weight_decay: float) -> torch.optim.SGD:
    return torch.optim.SGD(param_groups(model, weight_decay), lr=lr, momentum=momentum)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    kind: Literal["multistep", "cosine"],
    total_iters: int,
    warmup_iters: int,
    milestones: list[int] | None = None,
    gamma: float = 0.1,
    warmup_factor: float = 0.0,
    min_factor: float = 0.0,
) -> LambdaLR:
    """LR factor per iteration: linear warmup from ``warmup_factor`` to 1, then multistep or cosine decay.

    ``milestones`` are iteration indices (the trainer converts epochs to iterations).
    """
    steps = sorted(milestones or [])

    def factor(it: int) -> float:
        if it < warmup_iters:
            return warmup_factor + (1.0 - warmup_factor) * it / max(1, warmup_iters)
        if kind == "multistep":
            return float(gamma ** sum(it >= m for m in steps))
        progress = min(1.0, (it - warmup_iters) / max(1, total_iters - warmup_iters))
        return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)

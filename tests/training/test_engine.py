"""The training step: gradient clipping bounds the update."""

from typing import Any

import pytest
import torch
from torch import Tensor, nn

from training.engine import Trainer, train_one_epoch


class _SquaredTask:
    """Loss = 1000 x sum(w^2): the gradient norm is 2000 x ||w||, far above any clip value."""

    def loss(self, model: nn.Module, criterion: nn.Module, batch: Any, device: torch.device) -> Tensor:
        return 1000.0 * sum((p**2).sum() for p in model.parameters())  # type: ignore[return-value]


def _one_step(clip: float | None) -> float:
    model = nn.Linear(4, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.0)
    trainer = Trainer(
        task=_SquaredTask(),  # type: ignore[arg-type]
        model=model,
        criterion=nn.Identity(),
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        device=torch.device("cpu"),
        log_interval=100,
        clip_grad_norm=clip,
    )
    loader = [(torch.zeros(1, 3, 2, 2),)]
    train_one_epoch(trainer, loader, epoch=0, start_iter=0)  # type: ignore[arg-type]
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return float((after - before).norm())


def test_clip_grad_norm_bounds_the_step() -> None:
    # 15 parameters of 1.0: unclipped gradient norm 2000 x sqrt(15), so an LR-1 step that long.
    assert _one_step(None) == pytest.approx(2000.0 * 15**0.5, rel=1e-5)
    assert _one_step(0.5) == pytest.approx(0.5, rel=1e-4)

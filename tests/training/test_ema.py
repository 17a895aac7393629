"""The weights' moving average: TF's decay warm-up, every float entry averaged, counters copied."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from training.ema import ModelEma


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))


def test_decay_warms_up_like_tensorflow() -> None:
    ema = ModelEma(small_model(), decay=0.9998)
    assert ema.decay_at(0) == pytest.approx(0.1)
    assert ema.decay_at(90) == pytest.approx(91 / 100)
    assert ema.decay_at(10**6) == 0.9998


def test_update_averages_parameters_and_batchnorm_statistics() -> None:
    model = small_model()
    ema = ModelEma(model, decay=0.5)
    before = {k: v.clone() for k, v in ema.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model.train()
    model(torch.randn(2, 3, 8, 8))  # moves running_mean/var and num_batches_tracked
    ema.update(model)
    d = 0.1  # first update: min(0.5, 1 / 10)
    current = model.state_dict()
    for name, value in ema.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, d * before[name] + (1 - d) * current[name], msg=name)
        else:
            assert torch.equal(value, current[name]), name
    assert ema.updates == 1
    assert not any(p.requires_grad for p in ema.module.parameters())
    assert not ema.module.training


def test_resume_restores_weights_and_update_count() -> None:
    model = small_model()
    ema = ModelEma(model, decay=0.9)
    state = {k: v + 1 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    ema.load_state_dict(state, updates=500)
    assert ema.updates == 500 and ema.decay_at(ema.updates) == 0.9
    assert torch.equal(ema.state_dict()["0.weight"], state["0.weight"])
    with pytest.raises(ValueError, match=r"EMA decay must be in \(0, 1\)"):
        ModelEma(model, decay=1.0)


def test_update_is_bitwise_the_per_tensor_arithmetic() -> None:
    """The multi-tensor update computes exactly ``average.mul_(d).add_(value, alpha=1 - d)`` per entry."""
    model = small_model()
    ema = ModelEma(model, decay=0.99)
    reference = {k: v.clone() for k, v in ema.state_dict().items()}
    for _ in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        d = ema.decay_at(ema.updates)
        for name, value in model.state_dict().items():
            if value.is_floating_point():
                reference[name].mul_(d).add_(value, alpha=1 - d)
        ema.update(model)
    for name, value in ema.state_dict().items():
        if value.is_floating_point():
            assert torch.equal(value, reference[name]), name

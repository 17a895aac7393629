"""One registry from architecture name to its builder; checkpoints name an entry and carry its arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from training.models.ssd300.model import SSD300

Builder = Callable[..., nn.Module]

_BUILDERS: dict[str, Builder] = {"ssd300": SSD300}


def register(name: str, builder: Builder) -> None:
    if name in _BUILDERS:
        raise ValueError(f"model {name!r} is already registered")
    _BUILDERS[name] = builder


def model_names() -> list[str]:
    return sorted(_BUILDERS)


def build_model(name: str, **model_args: Any) -> nn.Module:
    """Build an untrained model; ``model_args`` are exactly what checkpoints store."""
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; expected one of {model_names()}") from None
    return builder(**model_args)

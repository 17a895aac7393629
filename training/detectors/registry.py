"""One registry from architecture name to its builder; checkpoints name an entry and carry its arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from training.detectors.efficientdet import MODEL_NAME as EFFICIENTDET_D0
from training.detectors.efficientdet import build_efficientdet_d0
from training.detectors.maskrcnn.model import maskrcnn_resnet50_fpn, maskrcnn_resnet50_fpn_v2
from training.detectors.ssd300.model import SSD300
from training.detectors.ssd320.model import SSD320

Builder = Callable[..., nn.Module]

_BUILDERS: dict[str, Builder] = {
    "ssd300": SSD300,
    "ssd320": SSD320,
    EFFICIENTDET_D0: build_efficientdet_d0,
    "maskrcnn_resnet50_fpn": maskrcnn_resnet50_fpn,
    "maskrcnn_resnet50_fpn_v2": maskrcnn_resnet50_fpn_v2,
}


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

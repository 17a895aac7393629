"""EfficientDet-D0 (effdet network, timm backbone).

The builder imports effdet lazily (see ``effdet_compat``): registering the model costs nothing until
a model is built.
"""

from __future__ import annotations

from typing import Any

from torch import nn

MODEL_NAME = "efficientdet-d0"


def build_efficientdet_d0(**model_args: Any) -> nn.Module:
    """``EfficientDetD0(**model_args)``; see ``training.detectors.efficientdet.model``."""
    from training.detectors.efficientdet.model import EfficientDetD0

    return EfficientDetD0(**model_args)


__all__ = ["MODEL_NAME", "build_efficientdet_d0"]

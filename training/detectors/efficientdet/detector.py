"""EfficientDet-D0's entry in the registry (``training.detectors.registry``).

The builder imports effdet lazily (see ``effdet_compat``): registering the model costs nothing until a
model is built.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from training.detectors.efficientdet.checkpoints import MODEL_NAME, efficientdet_checkpoint
from training.detectors.efficientdet.export import EfficientDetWrapper
from training.detectors.efficientdet.task import EfficientDetTask
from training.detectors.spec import Detector


def build_efficientdet_d0(**model_args: Any) -> nn.Module:
    """``EfficientDetD0(**model_args)``; see ``training.detectors.efficientdet.model``."""
    from training.detectors.efficientdet.model import EfficientDetD0

    return EfficientDetD0(**model_args)


DETECTORS = (
    Detector(
        MODEL_NAME,
        build_model=build_efficientdet_d0,
        task=EfficientDetTask,
        export_wrapper=EfficientDetWrapper,
        weight_readers=(efficientdet_checkpoint,),
    ),
)

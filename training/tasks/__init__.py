"""Per-architecture glue for the trainer: loaders, loss and prediction behind one small interface."""

from __future__ import annotations

from training.tasks.base import Batch, DetectorTask, Prediction
from training.tasks.efficientdet import EfficientDetTask
from training.tasks.maskrcnn import MaskRCNNTask, MaskRCNNV2Task
from training.tasks.ssd300 import SSD300Task
from training.tasks.ssd320 import SSD320Task

_TASKS: dict[str, type[DetectorTask]] = {
    "ssd300": SSD300Task,
    "ssd320": SSD320Task,
    EfficientDetTask.model_name: EfficientDetTask,
    MaskRCNNTask.model_name: MaskRCNNTask,
    MaskRCNNV2Task.model_name: MaskRCNNV2Task,
}


def get_task(model_name: str) -> type[DetectorTask]:
    try:
        return _TASKS[model_name]
    except KeyError:
        raise ValueError(
            f"no trainer task for model {model_name!r}; expected one of {sorted(_TASKS)}"
        ) from None


__all__ = ["Batch", "DetectorTask", "Prediction", "get_task"]

"""Per-architecture glue for the trainer: loaders, loss and prediction behind one small interface."""

from __future__ import annotations

from training.detectors.efficientdet.task import EfficientDetTask
from training.detectors.maskrcnn.task import MaskRCNNTask, MaskRCNNV2Task
from training.detectors.ssd300.task import SSD300Task
from training.detectors.ssd320.task import SSD320Task
from training.detectors.task import Batch, DetectorTask, Prediction

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

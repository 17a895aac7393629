"""SSD300's entry in the registry (``training.detectors.registry``)."""

from __future__ import annotations

from training.detectors.spec import Detector
from training.detectors.ssd300.export import SSD300Wrapper
from training.detectors.ssd300.model import SSD300
from training.detectors.ssd300.task import SSD300Task
from training.detectors.ssd300.weights import nvidia_ssd300_checkpoint

DETECTORS = (
    Detector(
        "ssd300",
        build_model=SSD300,
        task=SSD300Task,
        export_wrapper=SSD300Wrapper,
        weight_readers=(nvidia_ssd300_checkpoint,),
    ),
)

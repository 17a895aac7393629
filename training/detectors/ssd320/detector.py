"""SSD320's entry in the registry (``training.detectors.registry``)."""

from __future__ import annotations

from training.detectors.spec import Detector
from training.detectors.ssd320.export import SSD320Wrapper
from training.detectors.ssd320.model import SSD320
from training.detectors.ssd320.task import SSD320Task

DETECTORS = (Detector("ssd320", build_model=SSD320, task=SSD320Task, export_wrapper=SSD320Wrapper),)

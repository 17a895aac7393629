"""What one architecture contributes: its trainer task, model builder, export wrapper and weight readers.

Each ``training/detectors/<name>/detector.py`` defines ``DETECTORS``, a tuple of :class:`Detector` (one per
checkpoint ``model_name`` the folder builds); ``training.detectors.registry`` names the folders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from training.checkpoint import Checkpoint
    from training.detectors.export import ExportWrapper
    from training.detectors.task import DetectorTask

# ``torch.load``'s dict and the file's path -> a checkpoint, or None when the layout is not this reader's.
WeightReader = Callable[[dict[str, Any], Path], "Checkpoint | None"]


@dataclass(frozen=True)
class Detector:
    """One checkpoint ``model_name`` and the pieces that train, evaluate and export it."""

    name: str
    build_model: Callable[..., nn.Module]  # ``build_model(**model_args)``: what checkpoints store
    task: type[DetectorTask]
    export_wrapper: type[ExportWrapper]
    # Published weight files of other projects (NVIDIA, effdet, torchvision) loaded as this architecture.
    weight_readers: tuple[WeightReader, ...] = ()

"""The architectures: one line per ``training/detectors/<name>/`` folder, and lookups by model name.

A folder's ``detector.py`` (imported on first use, so that parsing ``detect-train`` arguments imports no
torch) defines ``DETECTORS`` (see ``training.detectors.spec``); its ``presets.py`` defines ``PRESETS``, the
named training recipes (plain values, importable without torch). Checkpoints store a model name and its
builder arguments; tasks, models, export wrappers, presets and foreign weight readers are all found here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from training.detectors.spec import Detector, WeightReader
    from training.detectors.task import DetectorTask


@dataclass(frozen=True)
class Entry:
    package: str  # ``training.detectors.<name>``
    names: tuple[str, ...]  # the checkpoint model names its ``detector.DETECTORS`` define


# Foreign weight files are tried in this order (``weight_readers``).
ENTRIES: tuple[Entry, ...] = (
    Entry("training.detectors.ssd300", ("ssd300",)),
    Entry("training.detectors.ssd320", ("ssd320",)),
    Entry("training.detectors.maskrcnn", ("maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2")),
    Entry("training.detectors.efficientdet", ("efficientdet-d0",)),
)


def model_names() -> list[str]:
    return sorted(name for entry in ENTRIES for name in entry.names)


def _entry(name: str) -> Entry:
    for entry in ENTRIES:
        if name in entry.names:
            return entry
    raise ValueError(f"unknown model {name!r}; expected one of {model_names()}")


@cache
def _detectors(package: str) -> dict[str, Detector]:
    detectors = importlib.import_module(f"{package}.detector").DETECTORS
    return {detector.name: detector for detector in detectors}


def get_detector(name: str) -> Detector:
    """The registered architecture named ``name`` (a checkpoint's ``model_name``); ValueError if none."""
    return _detectors(_entry(name).package)[name]


def get_task(name: str) -> type[DetectorTask]:
    return get_detector(name).task


def build_model(name: str, **model_args: Any) -> nn.Module:
    """Build an untrained model; ``model_args`` are exactly what checkpoints store."""
    return get_detector(name).build_model(**model_args)


def weight_readers() -> list[WeightReader]:
    """Every architecture's readers of other projects' weight files, in ``ENTRIES`` order."""
    return [
        reader
        for entry in ENTRIES
        for detector in _detectors(entry.package).values()
        for reader in detector.weight_readers
    ]


def presets() -> dict[str, dict[str, Any]]:
    """Every architecture's named training recipes (``detect-train --preset``), without importing torch."""
    found: dict[str, dict[str, Any]] = {}
    for entry in ENTRIES:
        for name, values in importlib.import_module(f"{entry.package}.presets").PRESETS.items():
            if name in found:
                raise ValueError(f"preset {name!r} is defined twice")
            found[name] = values
    return found

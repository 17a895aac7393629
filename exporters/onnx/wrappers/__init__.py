"""A checkpoint's export wrapper, found through the architecture registry (``training.detectors.registry``);
each wrapper lives in its architecture's folder (``training/detectors/<name>/export.py``)."""

from __future__ import annotations

from training.detectors.export import ExportWrapper, ImagePreprocess
from training.detectors.registry import get_detector, model_names


class UnsupportedArchitectureError(ValueError):
    """No export wrapper is registered for a checkpoint's architecture."""


def wrapper_names() -> list[str]:
    return model_names()


def get_wrapper(model_name: str) -> type[ExportWrapper]:
    try:
        return get_detector(model_name).export_wrapper
    except ValueError:
        raise UnsupportedArchitectureError(
            f"no exporter for architecture {model_name!r}; exportable: {wrapper_names()}"
        ) from None


__all__ = [
    "ExportWrapper",
    "ImagePreprocess",
    "UnsupportedArchitectureError",
    "get_wrapper",
    "wrapper_names",
]

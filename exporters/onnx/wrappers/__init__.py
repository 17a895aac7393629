"""A checkpoint's export wrapper, found through the architecture registry (``training.detectors.registry``);
each wrapper lives in its architecture's folder (``training/detectors/<name>/export.py``)."""

from __future__ import annotations

from training.checkpoint import Checkpoint
from training.detectors.export import ExportWrapper, ImagePreprocess
from training.detectors.registry import get_detector, model_names
from training.weights import build_checkpoint_model


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


def wrapper_for(checkpoint: Checkpoint, architecture: str | None = None) -> ExportWrapper:
    """The export wrapper of ``architecture`` (default: the checkpoint's model name) around the network
    ``checkpoint`` builds with its inference weights; a checkpoint of another architecture is a
    ValueError."""
    wrapper = get_wrapper(architecture or checkpoint.model_name)
    return wrapper(checkpoint, build_checkpoint_model(checkpoint))


__all__ = [
    "ExportWrapper",
    "ImagePreprocess",
    "UnsupportedArchitectureError",
    "get_wrapper",
    "wrapper_for",
    "wrapper_names",
]

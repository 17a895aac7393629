"""Registry from a checkpoint's ``model_name`` to its export wrapper (one module per architecture)."""

from __future__ import annotations

from training.detectors.efficientdet.export import EfficientDetWrapper
from training.detectors.export import ExportWrapper, ImagePreprocess
from training.detectors.maskrcnn.export import MaskRCNNV2Wrapper, MaskRCNNWrapper
from training.detectors.ssd300.export import SSD300Wrapper
from training.detectors.ssd320.export import SSD320Wrapper

_WRAPPERS: dict[str, type[ExportWrapper]] = {
    "ssd300": SSD300Wrapper,
    EfficientDetWrapper.architecture: EfficientDetWrapper,
    "ssd320": SSD320Wrapper,
    MaskRCNNWrapper.architecture: MaskRCNNWrapper,
    MaskRCNNV2Wrapper.architecture: MaskRCNNV2Wrapper,
}


class UnsupportedArchitectureError(ValueError):
    """No export wrapper is registered for a checkpoint's architecture."""


def wrapper_names() -> list[str]:
    return sorted(_WRAPPERS)


def get_wrapper(model_name: str) -> type[ExportWrapper]:
    try:
        return _WRAPPERS[model_name]
    except KeyError:
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

"""Inference backends behind one interface (`Backend`), and `create_backend` to pick and load one."""

from __future__ import annotations

from collections.abc import Callable

from service.backends.base import Backend, BackendLoadError
from service.backends.select import BackendKind, gpu_present, resolve_backend
from service.repository import ModelEntry
from service.settings import Settings

# How the app turns a repository entry into a backend; tests wrap the real factory to observe or gate it.
BackendFactory = Callable[[ModelEntry, Settings], Backend]

__all__ = [
    "Backend",
    "BackendFactory",
    "BackendKind",
    "BackendLoadError",
    "create_backend",
    "gpu_present",
    "resolve_backend",
]


def create_backend(entry: ModelEntry, settings: Settings) -> Backend:
    """Load ``entry``'s artifact on the backend ``settings.backend`` resolves to on this machine.

    Raises `BackendLoadError` saying why the artifact cannot run here.
    """
    kind = resolve_backend(settings.backend, entry.manifest.format)
    if kind == "tensorrt":
        from service.backends.tensorrt_backend import TensorRTBackend

        return TensorRTBackend(entry.manifest, entry.model_path)
    from service.backends.onnxruntime_backend import OnnxRuntimeBackend

    return OnnxRuntimeBackend(
        entry.manifest,
        entry.model_path,
        kind=kind,
        intra_op_threads=settings.intra_op_threads,
        inter_op_threads=settings.inter_op_threads,
        trt_cache_dir=settings.trt_cache_dir,
    )

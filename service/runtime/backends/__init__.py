"""Inference backends behind one interface (`Backend`), and `create_backend` to pick and load one."""

from __future__ import annotations

from collections.abc import Callable

from service.runtime.backends.base import Backend, BackendLoadError
from service.runtime.backends.machine import gpu_present
from service.runtime.backends.select import BackendKind, create_backend, load_artifact, resolve_backend
from service.runtime.repository import ModelEntry
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
    "load_artifact",
    "resolve_backend",
]

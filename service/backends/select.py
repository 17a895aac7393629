"""Which runtime runs an artifact: the `backend` setting resolved against this machine.

"auto" uses a GPU only when one really exists: an installed ``onnxruntime-gpu`` lists the CUDA provider
even on a machine without a GPU, so the provider list alone is not evidence.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Literal

from service.backends.base import BackendLoadError

BackendKind = Literal["cpu", "cuda", "tensorrt-ep", "tensorrt"]

CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"


@lru_cache(maxsize=1)
def gpu_present() -> bool:
    """True when an NVIDIA GPU is visible: a /dev/nvidia<N> device node, or ``nvidia-smi -L`` lists one."""
    if any(p.name[len("nvidia") :].isdigit() for p in Path("/dev").glob("nvidia*")):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        result = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def onnxruntime_providers() -> list[str]:
    """Execution providers the installed onnxruntime build offers (empty if onnxruntime is missing)."""
    try:
        import onnxruntime
    except ImportError:
        return []
    return list(onnxruntime.get_available_providers())


def resolve_backend(
    choice: str,
    model_format: str,
    *,
    providers: list[str] | None = None,
    has_gpu: bool | None = None,
) -> BackendKind:
    """The backend that will run a ``model_format`` ("onnx" | "tensorrt") artifact under setting ``choice``.

    ``providers`` and ``has_gpu`` default to this machine's; tests pass them to check the rules.
    Raises `BackendLoadError` when the choice cannot run the artifact here, saying why.
    """
    providers = onnxruntime_providers() if providers is None else providers
    has_gpu = gpu_present() if has_gpu is None else has_gpu
    if model_format == "tensorrt":
        # A serialized engine runs only in TensorRT itself (and only on the GPU it was built for).
        if choice not in ("auto", "tensorrt"):
            raise BackendLoadError(
                f"a TensorRT engine (model.plan) runs only on backend 'tensorrt', not {choice!r}"
            )
        return "tensorrt"
    if model_format != "onnx":
        raise BackendLoadError(f"unknown model format {model_format!r}")
    if choice == "tensorrt":
        raise BackendLoadError(
            "backend 'tensorrt' runs native engines (model.plan); "
            "for an ONNX model use 'tensorrt-ep' or 'auto'"
        )
    if choice == "auto":
        # CUDA EP rather than TensorRT EP: the TensorRT EP compiles engines at session creation, which can
        # take minutes per model; ask for 'tensorrt-ep' explicitly (or export a native engine) for that.
        return "cuda" if has_gpu and CUDA_PROVIDER in providers else "cpu"
    if choice in ("cuda", "tensorrt-ep"):
        needed = CUDA_PROVIDER if choice == "cuda" else TENSORRT_PROVIDER
        if not has_gpu:
            raise BackendLoadError(f"backend {choice!r} needs an NVIDIA GPU and none was found")
        if needed not in providers:
            raise BackendLoadError(
                f"backend {choice!r} needs onnxruntime's {needed}; this onnxruntime offers {providers} "
                "(install onnxruntime-gpu)"
            )
        return choice  # type: ignore[return-value]
    if choice == "cpu":
        return "cpu"
    raise BackendLoadError(f"unknown backend {choice!r}; expected auto, cpu, cuda, tensorrt-ep or tensorrt")

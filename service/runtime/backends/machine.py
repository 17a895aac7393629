"""What this machine offers the backends: an NVIDIA GPU, OpenVINO, ONNX Runtime's execution providers.

Probed here, below both the backend choice (``service.runtime.backends.select``) and the backends that
check for themselves (``service.runtime.backends.tensorrt_backend``).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from contract.cpu_classes import UnknownIsaError, cpu_flags, effective_class


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


def openvino_available() -> bool:
    """True when the ``openvino`` package can be imported (it is in the ``serve`` extra)."""
    return importlib.util.find_spec("openvino") is not None


def onnxruntime_providers() -> list[str]:
    """Execution providers the installed onnxruntime build offers (empty if onnxruntime is missing)."""
    try:
        import onnxruntime
    except ImportError:
        return []
    return list(onnxruntime.get_available_providers())


_CORE: Any = None  # openvino.Core, made on first use
_CORE_LOCK = threading.Lock()


def openvino_core() -> Any:
    """The process's one ``openvino.Core``, shared by every OpenVINO backend and probe (openvino must be
    installed).

    One per process, never one per model: each Core starts a CPU plugin of its own, which installs its
    own signal stack (``sigaltstack``) on the calling thread and, when it is destroyed, puts back the one
    it found. Two Cores destroyed in the order they were created (a model unloaded before one loaded after
    it) leave the thread on the first plugin's freed stack, and the next signal delivered to that thread
    (SIGCHLD, SIGTERM) kills the process with SIGSEGV, or writes over whatever memory took that place
    (OpenVINO 2026.4; `tests/service/runtime/backends/test_machine.py` runs it). A shared Core lives until
    the process exits, so its plugin's stack is never freed under a thread. Models loading on two threads
    at once still get one Core (a lock, not a cache that could build two and drop one)."""
    global _CORE
    with _CORE_LOCK:
        if _CORE is None:
            import openvino as ov

            _CORE = ov.Core()
        return _CORE


# CPU classes (`contract.cpu_classes`) without bf16 units.
_NO_BF16_CLASSES = ("avx2", "avx512_core", "avx512_vnni")


@lru_cache(maxsize=1)
def openvino_cpu_capabilities() -> tuple[str, ...]:
    """OpenVINO's ``OPTIMIZATION_CAPABILITIES`` of this CPU (``FP32``, ``INT8``, ``BF16`` where it has bf16
    units: AVX-512 BF16 or AMX); empty without openvino.

    ``BF16`` is left out when ``ONEDNN_MAX_CPU_ISA`` caps the process below the bf16 classes: the plugin
    reads the CPU's flags for its capabilities, but its kernels obey the cap, and a bf16 graph compiled
    under such a cap fails (no pooling kernel) where a CPU of that class would simply run f32."""
    if not openvino_available():
        return ()
    capabilities = tuple(openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    try:
        capped = effective_class(cpu_flags()) in _NO_BF16_CLASSES
    except UnknownIsaError:  # refused where the service starts (service.settings)
        capped = False
    return tuple(c for c in capabilities if not (capped and c == "BF16"))


def cpu_has_bf16() -> bool:
    """True when OpenVINO can run bf16 inference on this CPU."""
    return "BF16" in openvino_cpu_capabilities()


@lru_cache(maxsize=1)
def cpu_int8_instructions(cpuinfo: str = "/proc/cpuinfo") -> str:
    """Which INT8 instructions OpenVINO's INT8 kernels use on this CPU, the most capable first: ``amx_int8``,
    ``avx512_vnni``, ``avx_vnni``, ``none`` (AVX2's saturating ``vpmaddubsw``), or ``unknown`` (no
    /proc/cpuinfo). INT8 results differ between these, so an INT8 artifact's recorded accuracy names it
    (`contract.manifest.Accuracy.cpu_int8`)."""
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return "unknown"
    return next((flag for flag in ("amx_int8", "avx512_vnni", "avx_vnni") if flag in flags), "none")

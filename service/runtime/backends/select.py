"""Which runtime runs an artifact: the `backend` setting resolved against this machine.

"auto" uses a GPU only when one really exists: an installed ``onnxruntime-gpu`` lists the CUDA provider
even on a machine without a GPU, so the provider list alone is not evidence. On the CPU it picks ONNX
Runtime or OpenVINO by the rule measured in docs/cpu-inference.md (`cpu_runtime_for`).

`create_backend` loads a repository entry on the resolved backend; `load_artifact` does the same for a
version folder (``models/<name>/<version>``), e.g. to evaluate an artifact exactly as it is served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from contract.manifest import MANIFEST_FILE, Manifest
from service.runtime.backends.base import Backend, BackendLoadError
from service.runtime.backends.machine import gpu_present, onnxruntime_providers, openvino_available
from service.runtime.repository import ModelEntry
from service.settings import Settings

BackendKind = Literal["cpu", "cuda", "tensorrt-ep", "tensorrt", "openvino"]

CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"


NEEDS_OPENVINO = (
    "needs OpenVINO, which is not installed (pip install 'detect[serve]' or pip install openvino)"
)


def cpu_runtime_for(precision: str, *, openvino: bool) -> BackendKind:
    """The CPU runtime "auto" picks for an ONNX artifact of ``precision`` (docs/cpu-inference.md).

    bf16 and int8 run in OpenVINO: ONNX Runtime has no bf16 CPU path, and OpenVINO's bf16 / INT8 kernels
    were 3-9x ONNX Runtime fp32 at every batch size measured. fp32 (and fp16) stay in ONNX Runtime:
    OpenVINO f32 was within about 25% of it either way, ahead at some batch sizes and behind at others,
    never consistently ahead, and ONNX Runtime is the runtime every export is verified in.
    """
    if precision in ("bf16", "int8"):
        if not openvino:
            hint = " (or DETECT_BACKEND=cpu to run it in ONNX Runtime)" if precision == "int8" else ""
            raise BackendLoadError(f"a {precision} artifact {NEEDS_OPENVINO}{hint}")
        return "openvino"
    return "cpu"


def resolve_backend(
    choice: str,
    model_format: str,
    *,
    precision: str = "fp32",
    providers: list[str] | None = None,
    has_gpu: bool | None = None,
    openvino: bool | None = None,
) -> BackendKind:
    """The backend that will run a ``model_format`` ("onnx" | "openvino" | "tensorrt") artifact of
    ``precision`` under setting ``choice``.

    ``providers``, ``has_gpu`` and ``openvino`` default to this machine's; tests pass them to check the
    rules. Raises `BackendLoadError` when the choice cannot run the artifact here, saying why.
    """
    providers = onnxruntime_providers() if providers is None else providers
    has_gpu = gpu_present() if has_gpu is None else has_gpu
    openvino = openvino_available() if openvino is None else openvino
    if model_format == "tensorrt":
        # A serialized engine runs only in TensorRT itself (and only on the GPU it was built for).
        if choice not in ("auto", "tensorrt"):
            raise BackendLoadError(
                f"a TensorRT engine (model.plan) runs only on backend 'tensorrt', not {choice!r}"
            )
        return "tensorrt"
    if model_format == "openvino":
        if choice not in ("auto", "openvino"):
            raise BackendLoadError(
                f"an OpenVINO IR artifact (model.xml) runs only on backend 'openvino', not {choice!r}"
            )
        if not openvino:
            raise BackendLoadError(f"an OpenVINO IR artifact (model.xml) {NEEDS_OPENVINO}")
        return "openvino"
    if model_format != "onnx":
        raise BackendLoadError(f"unknown model format {model_format!r}")
    if choice == "tensorrt":
        raise BackendLoadError(
            "backend 'tensorrt' runs native engines (model.plan); "
            "for an ONNX model use 'tensorrt-ep' or 'auto'"
        )
    if choice == "openvino":
        if not openvino:
            raise BackendLoadError(f"backend 'openvino' {NEEDS_OPENVINO}")
        return "openvino"
    if choice == "auto":
        # CUDA EP rather than TensorRT EP: the TensorRT EP compiles engines at session creation, which can
        # take minutes per model; ask for 'tensorrt-ep' explicitly (or export a native engine) for that.
        if has_gpu and CUDA_PROVIDER in providers and precision in ("fp32", "fp16"):
            return "cuda"
        return cpu_runtime_for(precision, openvino=openvino)
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
        if precision == "bf16":
            raise BackendLoadError(f"a bf16 artifact {NEEDS_OPENVINO}: ONNX Runtime has no bf16 CPU path")
        return "cpu"
    raise BackendLoadError(
        f"unknown backend {choice!r}; expected auto, cpu, openvino, cuda, tensorrt-ep or tensorrt"
    )


def served_precision(manifest_precision: str, settings: Settings) -> str:
    """The precision an artifact is to run at: ``DETECT_OPENVINO_PRECISION`` overrides the manifest's
    floating-point precision (so "auto" takes a bf16 request to OpenVINO rather than ignoring it)."""
    if settings.openvino_precision == "bf16" and manifest_precision in ("fp32", "bf16"):
        return "bf16"
    if settings.openvino_precision == "f32" and manifest_precision == "bf16":
        return "fp32"
    return manifest_precision


def create_backend(entry: ModelEntry, settings: Settings) -> Backend:
    """Load ``entry``'s artifact on the backend ``settings.backend`` resolves to on this machine.

    ``settings`` are the service's: the entry's own (`Settings.for_model`) are taken from them here.
    Raises `BackendLoadError` saying why the artifact cannot run here.
    """
    settings = settings.for_model(entry.name, entry.serving)
    manifest = entry.manifest
    precision = served_precision(manifest.precision, settings)
    kind = resolve_backend(settings.backend, manifest.format, precision=precision)
    if kind == "tensorrt":
        from service.runtime.backends.tensorrt_backend import TensorRTBackend

        return TensorRTBackend(manifest, entry.model_path)
    if kind == "openvino":
        from service.runtime.backends.openvino_backend import OpenVinoBackend

        return OpenVinoBackend(
            manifest,
            entry.model_path,
            threads=settings.intra_op_threads,
            precision=settings.openvino_precision,
            cache_dir=settings.openvino_cache_dir,
            streams=settings.openvino_streams,
            static_batch_sizes=_static_batch_sizes(entry, settings),
            solo=settings.openvino_solo_graph,
        )
    from service.runtime.backends.onnxruntime_backend import OnnxRuntimeBackend

    return OnnxRuntimeBackend(
        manifest,
        entry.model_path,
        kind=kind,
        intra_op_threads=settings.intra_op_threads,
        inter_op_threads=settings.inter_op_threads,
        trt_cache_dir=settings.trt_cache_dir,
    )


def load_artifact(
    version_dir: str | Path,
    backend: str = "auto",
    settings: Settings | None = None,
    *,
    manifest: Manifest | None = None,
) -> Backend:
    """Load the artifact in ``version_dir`` (holding manifest.json) on ``backend`` (a ``DETECT_BACKEND``
    value), with the service's other settings from ``settings`` (default: the environment's).

    ``manifest``, when given, stands for the folder's manifest.json (an artifact checked before its
    manifest is written); its ``file`` is the model file in ``version_dir``.
    """
    version_dir = Path(version_dir)
    if manifest is None:
        if not (version_dir / MANIFEST_FILE).is_file():
            raise BackendLoadError(f"{version_dir}: no {MANIFEST_FILE}; pass an artifact version folder")
        manifest = Manifest.read(version_dir)
    entry = ModelEntry(name=manifest.name, version=manifest.version, directory=version_dir, manifest=manifest)
    settings = (settings or Settings()).model_copy(update={"backend": backend})
    return create_backend(entry, settings)


def _static_batch_sizes(entry: ModelEntry, settings: Settings) -> tuple[int, ...]:
    """The static-shape batch sizes to compile for ``entry``: the setting's, up to the model's max batch
    size; none for an artifact without a dynamic batch dimension (its one shape is static already)."""
    if not entry.manifest.dynamic_batch:
        return ()
    limit = settings.batching_for(entry.name, entry.manifest.max_batch_size).max_batch_size
    return tuple(size for size in settings.openvino_static_batches if size <= limit)

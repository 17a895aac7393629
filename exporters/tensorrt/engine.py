"""Building a TensorRT engine, and checking the built engine with the backend that serves it.

`BuildConfig` is the build configuration (one optimization profile over the dynamic batch, workspace,
timing cache), validated against the ONNX graph with no GPU. `build_engine` builds a strongly typed
engine through the real ``tensorrt`` Python API (imported only when called). `check_engine` runs the
engine through the service's TensorRT backend (``service.runtime.backends.tensorrt_backend``, the code that
serves it) and compares it with the same graph in ONNX Runtime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx import ModelProto

from contract.manifest import Manifest
from exporters.errors import ExportError
from exporters.evaluation.verify import generated_batches, manifest_resize
from exporters.onnx.ort_cpu import cpu_session, run_contract

if TYPE_CHECKING:
    from exporters.tensorrt.build import TensorRTExportRequest


@dataclass(frozen=True)
class BuildConfig:
    """Engine build settings: one optimization profile over the batch dimension of ``input_name``."""

    input_name: str
    height: int
    width: int
    channels: int = 3
    min_batch: int = 1
    opt_batch: int = 8
    max_batch: int = 32
    workspace_gb: float | None = None
    timing_cache: str | None = None

    @classmethod
    def for_artifact(cls, manifest: Manifest, request: TensorRTExportRequest) -> BuildConfig:
        """The build settings a `trt` request asks for, for the artifact's input."""
        return cls(
            input_name=manifest.input.name,
            height=manifest.input.height,
            width=manifest.input.width,
            min_batch=request.min_batch,
            opt_batch=request.opt_batch,
            max_batch=request.max_batch,
            workspace_gb=request.workspace_gb,
            timing_cache=str(request.timing_cache) if request.timing_cache else None,
        )

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(min, opt, max) input shapes, NHWC."""
        tail = (self.height, self.width, self.channels)
        return (self.min_batch, *tail), (self.opt_batch, *tail), (self.max_batch, *tail)

    def describe(self) -> dict[str, Any]:
        """The settings and the profile's shapes, as a manifest records them."""
        return {**asdict(self), "profile_shapes": [list(s) for s in self.shapes()]}

    def validate(self, model: ModelProto) -> None:
        """Raises ExportError naming the bad value: batch order, workspace, and that the graph's input
        has this name, a dynamic batch and the configured H, W, C."""
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ExportError(
                "batch sizes must satisfy 1 <= min <= opt <= max, got "
                f"min {self.min_batch}, opt {self.opt_batch}, max {self.max_batch}"
            )
        if self.workspace_gb is not None and self.workspace_gb <= 0:
            raise ExportError(f"--workspace-gb must be > 0, got {self.workspace_gb}")
        inputs = {i.name: i for i in model.graph.input}
        if self.input_name not in inputs:
            raise ExportError(f"the graph has no input {self.input_name!r}; inputs: {sorted(inputs)}")
        dims = inputs[self.input_name].type.tensor_type.shape.dim
        if len(dims) != 4:
            raise ExportError(f"input {self.input_name!r} has rank {len(dims)}, expected 4 (NHWC)")
        if dims[0].HasField("dim_value") and (self.min_batch, self.max_batch) != (dims[0].dim_value,) * 2:
            raise ExportError(
                f"input {self.input_name!r} has a fixed batch of {dims[0].dim_value}; no dynamic profile"
            )
        static = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims[1:])
        if static != (self.height, self.width, self.channels):
            raise ExportError(
                f"input {self.input_name!r} has shape [B, {static}], config expects "
                f"[B, {self.height}, {self.width}, {self.channels}]"
            )


def gpu_unavailable_reason() -> str | None:
    """None when an NVIDIA GPU is usable here, else why not (what was checked)."""
    try:
        import torch

        if torch.cuda.is_available():
            return None
    except ImportError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"nvidia-smi failed: {exc}"
        if listing.returncode == 0 and "GPU" in listing.stdout:
            return None
        return f"nvidia-smi lists no GPU (exit {listing.returncode})"
    return "no NVIDIA GPU: torch.cuda.is_available() is False and nvidia-smi is not installed"


def _import_tensorrt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise ExportError(
            "the tensorrt Python package is not installed; "
            "install the serve-gpu extra (pip install '.[serve-gpu]')"
        ) from exc
    return trt


def build_engine(onnx_path: Path, config: BuildConfig, plan_path: Path, int8: bool = False) -> dict[str, Any]:
    """Build a strongly typed engine from ``onnx_path`` (precision from the graph) and write ``plan_path``.

    ``int8``: the graph is an explicit-precision QDQ network (QuantizeLinear / DequantizeLinear pairs);
    strong typing takes INT8 from its Q/DQ nodes, and a TensorRT without strong typing gets the INT8 flag.

    The timing cache is read from ``config.timing_cache`` when it exists and written back (atomically)
    after the build, so repeated builds reuse kernel timings.
    """
    trt = _import_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    # Strong typing: required opt-in on TensorRT 10.x, the only mode (flag accepted, ignored) on 11.x.
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if strongly_typed is not None:
        flags |= 1 << int(strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise ExportError(f"TensorRT cannot parse {onnx_path}: {errors}")
    builder_config = builder.create_builder_config()
    if int8 and strongly_typed is None:
        builder_config.set_flag(trt.BuilderFlag.INT8)
    if config.workspace_gb is not None:
        builder_config.set_memory_pool_limit(
            trt.MemoryPoolType.WORKSPACE, int(config.workspace_gb * (1 << 30))
        )
    profile = builder.create_optimization_profile()
    profile.set_shape(config.input_name, *config.shapes())
    builder_config.add_optimization_profile(profile)
    cache_path = Path(config.timing_cache) if config.timing_cache else None
    cache_bytes = cache_path.read_bytes() if cache_path is not None and cache_path.is_file() else b""
    timing_cache = builder_config.create_timing_cache(cache_bytes)
    builder_config.set_timing_cache(timing_cache, ignore_mismatch=False)
    started = time.perf_counter()
    serialized = builder.build_serialized_network(network, builder_config)
    if serialized is None:
        raise ExportError("TensorRT engine build failed (see TensorRT's log above)")
    plan_path.write_bytes(bytes(serialized))
    if cache_path is not None:
        tmp = cache_path.with_name(f".{cache_path.name}.tmp")
        tmp.write_bytes(bytes(builder_config.get_timing_cache().serialize()))
        os.replace(tmp, cache_path)
    return {
        "tensorrt": str(trt.__version__),
        "build_seconds": round(time.perf_counter() - started, 1),
        "strongly_typed": strongly_typed is not None,
        "int8": int8,
        "timing_cache_reused": bool(cache_bytes),
    }


def check_engine(plan_path: Path, reference: ModelProto, manifest: Manifest) -> dict[str, Any]:
    """The engine, loaded as the service loads it (``manifest`` is the engine artifact's), against
    ``reference`` (the graph it was built from) in ONNX Runtime on one generated batch (GPU only)."""
    from exporters.evaluation.compare import (
        Detections,
        contract_problems,
        match_detections,
        summarize_matches,
    )
    from service.runtime.backends.tensorrt_backend import TensorRTBackend

    batch = generated_batches(manifest_resize(manifest), sizes=(3,))[0]
    backend = TensorRTBackend(manifest, plan_path)
    try:
        engine_out = backend.infer(batch)
    finally:
        backend.close()
    reference_out = run_contract(cpu_session(reference), batch)
    matches = [
        match_detections(
            ref,
            got,
            box_tol=1e-2,
            score_tol=1e-2,
            score_threshold=manifest.score_threshold,
            iou_threshold=manifest.iou_threshold,
            max_detections=manifest.max_detections,
        )
        for ref, got in zip(
            Detections.from_contract(reference_out), Detections.from_contract(engine_out), strict=True
        )
    ]
    problems = contract_problems(engine_out, len(batch), manifest.max_detections)
    return {
        "contract": {"passed": not problems, "problems": problems},
        "detections_vs_onnxruntime": summarize_matches(matches),
    }

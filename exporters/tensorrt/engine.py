"""Building a TensorRT engine, and checking the built engine with the backend that serves it.

`build_engine` builds a strongly typed engine through the real ``tensorrt`` Python API (imported only
when called), as `exporters.tensorrt.config.BuildConfig` says. `check_engine` loads the engine as the
service loads it (`service.served.load_backend`, backend ``tensorrt``: the code that serves it) and
compares it with the same graph in ONNX Runtime.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from onnx import ModelProto

from contract.manifest import Manifest
from exporters.errors import ExportError
from exporters.evaluation.verify import generated_batches, manifest_resize
from exporters.onnx.ort_cpu import cpu_session, run_contract
from exporters.tensorrt.config import BuildConfig


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


def tensorrt_unavailable_reason() -> str | None:
    """None when TensorRT engines can be built here (a usable NVIDIA GPU and the ``tensorrt`` package),
    else why not."""
    reason = gpu_unavailable_reason()
    if reason is None and importlib.util.find_spec("tensorrt") is None:
        return "the tensorrt package is not installed (pip install '.[serve-gpu]')"
    return reason


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


def check_engine(version_dir: Path, reference: ModelProto, manifest: Manifest) -> dict[str, Any]:
    """The engine in ``version_dir`` (``manifest.file``), loaded as the service loads it (``manifest`` is
    the engine artifact's), against ``reference`` (the graph it was built from) in ONNX Runtime on one
    generated batch (GPU only)."""
    from exporters.evaluation.compare import (
        Detections,
        contract_problems,
        match_detections,
        summarize_matches,
    )
    from service.served import load_backend

    batch = generated_batches(manifest_resize(manifest), sizes=(3,))[0]
    backend = load_backend(version_dir, "tensorrt", manifest=manifest)
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

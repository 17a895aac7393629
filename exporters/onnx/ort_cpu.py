"""ONNX Runtime (CPU) sessions as the exporters use them: verification, FP16 evaluation, benchmarks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import ModelProto

from contract.manifest import MASK_OUTPUT, OUTPUT_NAMES
from exporters.errors import InvalidModelError


def cpu_session(model: str | Path | ModelProto, threads: int = 0) -> ort.InferenceSession:
    """A CPU session with all graph optimizations; ``threads`` 0 = one per core.

    Raises:
        InvalidModelError: ONNX Runtime cannot load the model.
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: ORT warns about unused initializers on every load
    # As the service configures it: idle intra-op threads would otherwise spin after each run and take
    # the cores from whatever runs next in this process (eager PyTorch in a benchmark, the next session).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    source = model.SerializeToString() if isinstance(model, ModelProto) else str(model)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        what = "in-memory model" if isinstance(model, ModelProto) else str(model)
        raise InvalidModelError(f"ONNX Runtime cannot load {what}: {exc}") from exc


def contract_names(session: ort.InferenceSession) -> list[str]:
    """The contract outputs a session has: the four detection outputs, plus ``detection_masks`` if any."""
    available = {o.name for o in session.get_outputs()}
    return [*OUTPUT_NAMES, *((MASK_OUTPUT,) if MASK_OUTPUT in available else ())]


def run_contract(session: ort.InferenceSession, images: np.ndarray) -> dict[str, np.ndarray]:
    """Run a detector graph on uint8 ``[B, H, W, 3]`` images; returns the contract outputs by name."""
    names = contract_names(session)
    values = session.run(names, {"images": images})
    return dict(zip(names, values, strict=True))

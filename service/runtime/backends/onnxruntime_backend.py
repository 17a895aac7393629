"""ONNX Runtime backend: CPU, CUDA or TensorRT execution provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from contract.manifest import Manifest
from service.runtime.backends.base import Backend, BackendLoadError


def providers_for(kind: str, manifest: Manifest, trt_cache_dir: Path | None = None) -> list[Any]:
    """The ordered provider list for a resolved backend kind ("cpu" | "cuda" | "tensorrt-ep")."""
    if kind == "cpu":
        return ["CPUExecutionProvider"]
    if kind == "cuda":
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if kind == "tensorrt-ep":
        trt_options: dict[str, Any] = {"trt_fp16_enable": manifest.precision == "fp16"}
        if trt_cache_dir is not None:
            # Engine builds take minutes; caching makes every start after the first one fast.
            trt_options |= {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(trt_cache_dir)}
        return [("TensorrtExecutionProvider", trt_options), "CUDAExecutionProvider", "CPUExecutionProvider"]
    raise ValueError(f"not an ONNX Runtime backend kind: {kind!r}")


class OnnxRuntimeBackend(Backend):
    """Runs ``model.onnx`` in an `onnxruntime.InferenceSession`.

    ``intra_op_threads`` / ``inter_op_threads`` of 0 keep ONNX Runtime's defaults (one thread per core).
    """

    def __init__(
        self,
        manifest: Manifest,
        model_path: Path,
        *,
        kind: str = "cpu",
        intra_op_threads: int = 0,
        inter_op_threads: int = 0,
        trt_cache_dir: Path | None = None,
    ):
        super().__init__(manifest)
        import onnxruntime as ort  # imported here so the service starts without it when serving engines only

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = inter_op_threads
        # Idle intra-op threads otherwise spin after each run, taking the cores that decode and render
        # the next requests; a batch only starts after a queue delay anyway.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: exported graphs trigger harmless optimizer warnings
        self._providers = providers_for(kind, manifest, trt_cache_dir)
        try:
            self._session = ort.InferenceSession(str(model_path), options, providers=self._providers)
        except Exception as exc:
            raise BackendLoadError(f"{model_path}: onnxruntime cannot load it: {exc}") from exc
        inputs = self._session.get_inputs()
        if len(inputs) != 1 or inputs[0].name != manifest.input.name:
            raise BackendLoadError(
                f"{model_path}: graph inputs {[i.name for i in inputs]}; manifest expects one named "
                f"{manifest.input.name!r}"
            )
        graph_outputs = {o.name for o in self._session.get_outputs()}
        missing = [n for n in manifest.outputs if n not in graph_outputs]
        if missing:
            raise BackendLoadError(f"{model_path}: graph has no outputs {missing} that the manifest lists")
        self._input_name = inputs[0].name
        self._output_names = list(manifest.outputs)

    @property
    def description(self) -> str:
        return f"onnxruntime[{','.join(self._session.get_providers())}]"

    def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        values = self._session.run(self._output_names, {self._input_name: inputs})
        return dict(zip(self._output_names, values, strict=True))

"""Native TensorRT backend: deserializes ``model.plan`` and runs it with dynamic-shape binding.

Needs an NVIDIA GPU, the ``tensorrt`` package and ``cuda-python`` (the ``serve-gpu`` extra); all are
imported only when this backend is constructed, so the service imports cleanly without them.
An engine is specific to the GPU model and TensorRT version that built it.

Uses the name-based tensor API (TensorRT >= 8.5; the only one in 10+): ``set_input_shape``,
``set_tensor_address``, ``execute_async_v3``. Device buffers are allocated once for the largest batch
of optimization profile 0; each call copies in, runs and copies out on one CUDA stream.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from contract.manifest import Manifest
from service.runtime.backends.base import Backend, BackendLoadError
from service.runtime.backends.machine import gpu_present

logger = logging.getLogger(__name__)


def _import_cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python layout
        except ImportError as exc:
            raise BackendLoadError(
                "backend 'tensorrt' needs cuda-python (pip install 'detect[serve-gpu]')"
            ) from exc
    return cudart


class TensorRTBackend(Backend):
    """Runs a serialized TensorRT engine on the current CUDA device."""

    def __init__(self, manifest: Manifest, engine_path: Path):
        super().__init__(manifest)
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise BackendLoadError(
                "backend 'tensorrt' needs the tensorrt package (pip install 'detect[serve-gpu]')"
            ) from exc
        if not gpu_present():
            raise BackendLoadError("backend 'tensorrt' needs an NVIDIA GPU and none was found")
        self._trt = trt
        self._cudart = _import_cudart()
        self._buffers: dict[str, int] = {}
        self._stream: Any = None

        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        engine = self._runtime.deserialize_cuda_engine(engine_path.read_bytes())
        if engine is None:
            raise BackendLoadError(
                f"{engine_path}: TensorRT could not deserialize the engine (built for another GPU or "
                f"TensorRT version than {trt.__version__}?)"
            )
        self._engine = engine
        self._context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self._outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        if self._inputs != [manifest.input.name]:
            raise BackendLoadError(
                f"{engine_path}: engine inputs {self._inputs}; "
                f"manifest expects one named {manifest.input.name!r}"
            )
        missing = [n for n in manifest.outputs if n not in self._outputs]
        if missing:
            raise BackendLoadError(f"{engine_path}: engine has no outputs {missing} that the manifest lists")
        self._input_name = self._inputs[0]
        self._input_dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(self._input_name)))
        expected_dtype = np.dtype(manifest.input.dtype)
        if self._input_dtype != expected_dtype:
            raise BackendLoadError(
                f"{engine_path}: engine input dtype {self._input_dtype}; manifest says {expected_dtype}"
            )
        self._allocate(engine_path)

    def _allocate(self, engine_path: Path) -> None:
        engine, context, cudart = self._engine, self._context, self._cudart
        declared = tuple(engine.get_tensor_shape(self._input_name))
        if declared[0] == -1:
            # Dynamic batch: profile 0 gives (min, opt, max) shapes; size buffers for max.
            _, _, max_shape = engine.get_tensor_profile_shape(self._input_name, 0)
            max_shape = tuple(max_shape)
        else:
            max_shape = declared
        if max_shape[0] < self.max_batch_size:
            raise BackendLoadError(
                f"{engine_path}: engine accepts batches up to {max_shape[0]}, "
                f"manifest says {self.max_batch_size}"
            )
        context.set_input_shape(self._input_name, max_shape)
        self._stream = self._check(cudart.cudaStreamCreate())
        for name in [self._input_name, *self._outputs]:
            shape = tuple(context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise BackendLoadError(
                    f"{engine_path}: output {name!r} has a data-dependent shape {shape}; the output contract "
                    "needs fixed K (use the NMS-plugin layout)"
                )
            dtype = np.dtype(self._trt.nptype(engine.get_tensor_dtype(name)))
            nbytes = int(np.prod(shape)) * dtype.itemsize
            self._buffers[name] = int(self._check(cudart.cudaMalloc(max(nbytes, 1))))
            context.set_tensor_address(name, self._buffers[name])

    def _check(self, result: Any) -> Any:
        """cuda-python returns ``(error, *values)``; raise on error, return the value(s)."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self._cudart.cudaError_t.cudaSuccess:
            _, text = self._cudart.cudaGetErrorString(err)
            raise RuntimeError(f"CUDA error {err}: {text.decode() if isinstance(text, bytes) else text}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    @property
    def description(self) -> str:
        return f"tensorrt[{self._trt.__version__}]"

    def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        cudart, context = self._cudart, self._context
        x = np.ascontiguousarray(inputs, dtype=self._input_dtype)
        if not context.set_input_shape(self._input_name, x.shape):
            raise RuntimeError(f"TensorRT rejected input shape {x.shape}")
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._check(
            cudart.cudaMemcpyAsync(
                self._buffers[self._input_name], x.ctypes.data, x.nbytes, h2d, self._stream
            )
        )
        if not context.execute_async_v3(int(self._stream)):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        results: dict[str, np.ndarray] = {}
        for name in self._outputs:
            shape = tuple(context.get_tensor_shape(name))
            out = np.empty(shape, dtype=np.dtype(self._trt.nptype(self._engine.get_tensor_dtype(name))))
            self._check(
                cudart.cudaMemcpyAsync(out.ctypes.data, self._buffers[name], out.nbytes, d2h, self._stream)
            )
            results[name] = out
        self._check(cudart.cudaStreamSynchronize(self._stream))
        return results

    def close(self) -> None:
        for ptr in self._buffers.values():
            self._cudart.cudaFree(ptr)
        self._buffers.clear()
        if self._stream is not None:
            self._cudart.cudaStreamDestroy(self._stream)
            self._stream = None

"""OpenVINO backend (CPU): runs ONNX artifacts (``model.onnx``) and OpenVINO IR (``model.xml`` + ``.bin``).

The inference precision is always set explicitly, never left to the plugin: OpenVINO's CPU plugin
otherwise runs f32 graphs in bf16 on CPUs with AVX-512 BF16 / AMX. `precision_hint_for` decides it from
the manifest's ``precision`` (and an INT8 artifact's ``unquantized_precision``) and the ``openvino_precision``
setting; the precision in effect is read back from the compiled model (`OpenVinoBackend.inference_precision`)
and shown in /v1/models and metrics.

On a CPU without bf16 units (OpenVINO's ``OPTIMIZATION_CAPABILITIES`` lacks ``BF16``) the plugin would run
f32 anyway: an INT8 artifact whose manifest only prefers bf16 for its unquantized layers then runs them in
f32 (logged, and reported as f32), while an explicit bf16 request (the setting, or a bf16 artifact) is
refused with the reason, since nothing switches precision silently.

Compiled models are cached in ``cache_dir`` (OpenVINO's ``CACHE_DIR``): a restart imports the compiled
blob instead of reading, optimizing and compiling the graph again.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from contract.cpu_classes import cpu_flags, effective_class
from contract.manifest import Manifest
from service.errors import BackendError
from service.runtime.backends.base import Backend, BackendLoadError
from service.runtime.backends.machine import (
    openvino_core,
    openvino_cpu_capabilities,
)

logger = logging.getLogger(__name__)

# The ``openvino_precision`` setting: follow the artifact's manifest, or force f32 / bf16.
PrecisionSetting = Literal["manifest", "f32", "bf16"]


def precision_hint_for(manifest: Manifest, setting: str = "manifest") -> str:
    """The ``INFERENCE_PRECISION_HINT`` (``f32`` | ``bf16``) to compile an artifact with.

    ``manifest``: a ``bf16`` artifact runs in bf16 and an ``fp32`` one in f32; an ``int8`` artifact runs
    the layers it keeps in floating point at its ``unquantized_precision`` (f32 unless it says bf16);
    anything else is refused.
    """
    if setting in ("f32", "bf16"):
        return setting
    if setting != "manifest":
        raise BackendLoadError(f"openvino_precision must be manifest, f32 or bf16, not {setting!r}")
    if manifest.precision == "bf16":
        return "bf16"
    if manifest.precision == "int8":
        return manifest.unquantized_precision or "f32"
    if manifest.precision == "fp32":
        return "f32"
    raise BackendLoadError(
        f"OpenVINO has no {manifest.precision!r} CPU inference; run this artifact on another backend or set "
        "DETECT_OPENVINO_PRECISION=f32|bf16"
    )


def hint_for_cpu(manifest: Manifest, setting: str, cpu_capabilities: list[str]) -> str:
    """`precision_hint_for`, adjusted to a CPU whose OpenVINO capabilities are ``cpu_capabilities``."""
    hint = precision_hint_for(manifest, setting)
    if hint != "bf16" or "BF16" in cpu_capabilities:
        return hint
    if setting == "manifest" and manifest.precision == "int8":
        logger.warning(
            "this CPU has no bf16 units (OpenVINO capabilities %s): the INT8 artifact's unquantized layers "
            "run in f32",
            cpu_capabilities,
        )
        return "f32"
    raise BackendLoadError(
        f"bf16 inference asked for, but this CPU has no bf16 units (OpenVINO capabilities "
        f"{cpu_capabilities}); set DETECT_OPENVINO_PRECISION=f32"
    )


def _type_name(value: Any) -> str:
    """``f32`` / ``bf16`` from an OpenVINO element type (or its string form)."""
    name = getattr(value, "get_type_name", None)
    text = str(name() if callable(name) else value).lower()
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(text, text)


def _warn_if_unmeasured_here(manifest: Manifest, model_path: Path) -> None:
    """Warn when an INT8 artifact's accuracy was never measured on this machine's CPU class."""
    cpu_class = effective_class(cpu_flags())
    measured = manifest.accuracy.by_isa if manifest.accuracy is not None else {}
    if manifest.precision == "int8" and cpu_class not in measured:
        logger.warning(
            "%s: its accuracy was not measured on this CPU class (%s; measured on %s): OpenVINO runs "
            "INT8 differently per class (docs/quantization.md), the self-check at load is what vouches "
            "for its answers here",
            model_path,
            cpu_class,
            sorted(measured) or "an unrecorded class",
        )


def _compile_config(
    hint: str, threads: int, streams: int, static_batch_sizes: tuple[int, ...]
) -> dict[str, Any]:
    """The CPU plugin's compile properties (the cache folder apart); raises `BackendLoadError` for
    streams or static batch sizes below 1."""
    if streams < 1:
        raise BackendLoadError(f"openvino streams must be >= 1, not {streams}")
    if any(size < 1 for size in static_batch_sizes):
        raise BackendLoadError(f"openvino static batch sizes must be >= 1, not {static_batch_sizes}")
    config: dict[str, Any] = {
        "INFERENCE_PRECISION_HINT": hint,
        "PERFORMANCE_HINT": "LATENCY" if streams == 1 else "THROUGHPUT",
        "NUM_STREAMS": streams,
    }
    if threads > 0:
        config["INFERENCE_NUM_THREADS"] = threads
    return config


class OpenVinoBackend(Backend):
    """Runs an ONNX or IR artifact on OpenVINO's CPU plugin.

    With ``streams`` 1 (the default) one infer request uses every thread on each batch: the batcher calls
    it from one thread, and batches carry the parallelism. With ``streams`` N > 1 OpenVINO splits its
    threads into N streams that run N infer requests side by side, one per batch worker; on few cores a
    small model uses them better that way (docs/cpu-inference.md, "Inference streams"), at the cost of a
    lone request's latency. With ``solo`` (and ``streams`` > 1) it also compiles a graph for one image on
    one stream of every thread, which the batcher runs a lone request on while the streams are idle
    (`Backend.solo`). ``threads`` of 0 keeps OpenVINO's default (one per physical core).
    """

    def __init__(
        self,
        manifest: Manifest,
        model_path: Path,
        *,
        threads: int = 0,
        precision: str = "manifest",
        cache_dir: Path | None = None,
        streams: int = 1,
        static_batch_sizes: tuple[int, ...] = (),
        solo: bool = False,
    ):
        super().__init__(manifest)
        try:
            import openvino as ov
        except ImportError as exc:
            raise BackendLoadError(
                "backend 'openvino' needs the openvino package (pip install 'detect[serve]')"
            ) from exc
        self._version = ov.__version__.split("-")[0]
        hint = hint_for_cpu(manifest, precision, list(openvino_cpu_capabilities()))
        _warn_if_unmeasured_here(manifest, model_path)
        config = _compile_config(hint, threads, streams, static_batch_sizes)
        core = openvino_core()
        self.cache_dir = _usable_cache_dir(cache_dir)
        if self.cache_dir is not None:
            # A compile property, not a Core one: the Core is shared by every backend in the process.
            config["CACHE_DIR"] = str(self.cache_dir)
        started = time.perf_counter()
        try:
            # Compiling from the path lets a cache hit skip reading and converting the graph entirely.
            self._compiled = core.compile_model(str(model_path), "CPU", config)
        except Exception as exc:
            raise BackendLoadError(f"{model_path}: openvino cannot load it: {exc}") from exc
        self._check_graph(model_path)
        self.inference_precision = _type_name(self._compiled.get_property("INFERENCE_PRECISION_HINT"))
        if self.inference_precision != hint:
            raise BackendLoadError(
                f"{model_path}: asked OpenVINO for {hint} inference, the compiled model runs "
                f"{self.inference_precision}"
            )
        self.streams = int(self._compiled.get_property("NUM_STREAMS"))
        # Static-shape graphs for the batch sizes asked for: the CPU plugin prepares a dynamic graph again
        # whenever the batch size changes, and runs it slower even when it does not (docs/cpu-inference.md,
        # "Static batch shapes").
        if self.streams > 1 and static_batch_sizes and _has_roi_align(core, model_path):
            logger.warning(
                "%s: no static batch graphs beside %d streams for a graph with ROIAlign: OpenVINO %s "
                "compiles some so that every ROIAlign run fails (docs/cpu-inference.md, static batch shapes)",
                model_path,
                self.streams,
                self._version,
            )
            static_batch_sizes = ()
        static = {size: self._compile_static(core, model_path, size, config) for size in static_batch_sizes}
        self.static_batch_sizes = tuple(sorted(static))
        self._solo_requests: _RequestPool | None = None
        if solo and self.streams > 1 and self.dynamic_batch:  # a fixed-batch artifact has one shape only
            solo_config = {**config, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
            solo_graph = self._compile_static(core, model_path, 1, solo_config, streams=1)
            self._solo_requests = _RequestPool(solo_graph, 1, self.manifest.outputs)
            self.solo = True
        self.load_seconds = time.perf_counter() - started
        # One request pool per graph; a batch runs on its size's static graph, or else the dynamic one.
        self._requests: dict[int | None, _RequestPool] | None = {
            size: _RequestPool(compiled, self.streams, self.manifest.outputs)
            for size, compiled in [(None, self._compiled), *static.items()]
        }
        logger.info(
            "openvino %s: %s loaded in %.2fs (%s, %d stream%s%s, static batch sizes %s, compile cache %s)",
            self._version,
            model_path,
            self.load_seconds,
            self.inference_precision,
            self.streams,
            "" if self.streams == 1 else "s",
            " and a solo graph" if self.solo else "",
            ",".join(map(str, self.static_batch_sizes)) or "none",
            self.cache_dir or "off",
        )

    def _compile_static(
        self, core: Any, model_path: Path, size: int, config: dict[str, Any], streams: int | None = None
    ) -> Any:
        """The artifact compiled with its batch dimension fixed at ``size`` (with ``config``), checked to run
        ``streams`` streams (default: the dynamic graph's)."""
        try:
            compiled = core.compile_model(read_with_batch_size(core, model_path, size), "CPU", config)
        except Exception as exc:
            raise BackendLoadError(
                f"{model_path}: openvino cannot compile it at batch size {size}: {exc}"
            ) from exc
        if int(compiled.get_property("NUM_STREAMS")) != (streams or self.streams):
            raise BackendLoadError(f"{model_path}: the batch-{size} graph got a different number of streams")
        return compiled

    def _check_graph(self, model_path: Path) -> None:
        inputs = self._compiled.inputs
        input_names = [sorted(port.get_names()) for port in inputs]
        if len(inputs) != 1 or self.manifest.input.name not in inputs[0].get_names():
            raise BackendLoadError(
                f"{model_path}: graph inputs {input_names}; manifest expects one named "
                f"{self.manifest.input.name!r}"
            )
        graph_outputs = {name for port in self._compiled.outputs for name in port.get_names()}
        missing = [n for n in self.manifest.outputs if n not in graph_outputs]
        if missing:
            raise BackendLoadError(f"{model_path}: graph has no outputs {missing} that the manifest lists")

    @property
    def description(self) -> str:
        return f"openvino[{self._version},CPU,{self.inference_precision}]"

    def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        pools = self._requests
        if pools is None:
            raise BackendError("the model was unloaded")
        return pools.get(len(inputs), pools[None]).infer(inputs)

    def _run_solo(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        if self._solo_requests is None:
            raise BackendError("the model was unloaded" if self._requests is None else "no solo graph")
        return self._solo_requests.infer(inputs)

    def close(self) -> None:
        self._requests = None
        self._solo_requests = None
        self._compiled = None


class _RequestPool:
    """One compiled graph's infer requests, one per stream, and its output ports by contract name."""

    def __init__(self, compiled: Any, streams: int, outputs: Sequence[str]) -> None:
        # First in, first out: calls one after another take the requests in turn (warmup relies on it).
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(streams):
            self._requests.put(compiled.create_infer_request())
        self._ports = {name: compiled.output(name) for name in outputs}

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Borrow a request (the batch workers call concurrently), run ``inputs``, give it back."""
        request = self._requests.get()
        try:
            # share_outputs=False: the results outlive this call while the request's buffers are reused.
            results = request.infer({0: inputs}, share_inputs=True, share_outputs=False)
        finally:
            self._requests.put(request)
        return {name: results[port] for name, port in self._ports.items()}


def read_with_batch_size(core: Any, model_path: Path, size: int) -> Any:
    """The artifact at ``model_path`` read by ``core`` (an ``openvino.Core``) with its batch dimension
    fixed at ``size``: the graph OpenVINO compiles for that one shape."""
    model = core.read_model(str(model_path))
    shape = model.input(0).get_partial_shape()
    shape[0] = size
    model.reshape({model.input(0): shape})
    return model


def _has_roi_align(core: Any, model_path: Path) -> bool:
    """Whether the artifact's graph has a ROIAlign op (a two-stage model's RoI heads)."""
    return any(op.get_type_name() == "ROIAlign" for op in core.read_model(str(model_path)).get_ops())


def _usable_cache_dir(cache_dir: Path | None) -> Path | None:
    """``cache_dir`` created if needed; None (no cache, logged) when it cannot be written."""
    if cache_dir is None:
        return None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        probe = cache_dir / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        logger.warning(
            "openvino compile cache %s is not writable (%s); compiling without a cache", cache_dir, exc
        )
        return None
    return cache_dir

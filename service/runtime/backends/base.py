"""The interface every inference backend implements, and the contract checks they share.

A backend runs one artifact. Callers hand it what the service produces — ``uint8 [B, H, W, 3]`` RGB
images already resized to the manifest's input size — and get the manifest's output contract back:

==================  ===============  =======
num_detections      [B, 1]           int32
detection_boxes     [B, K, 4]        float32   x1, y1, x2, y2 normalized to the network input
detection_scores    [B, K]           float32
detection_classes   [B, K]           int32
detection_masks     [B, K, Mh, Mw]   float32   (mask models only)
==================  ===============  =======

`Backend.infer` adapts the images to what the graph declares (colour order, layout, dtype), pads a
short batch for fixed-batch artifacts and slices the padding off again, and checks the outputs, so a
concrete backend only implements `Backend._run`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from contract.manifest import MASK_OUTPUT, Manifest
from service.errors import BackendError

# What a manifest's ``precision`` computes in when the runtime does not say otherwise.
_FLOAT_PRECISION = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "int8": "f32"}


class BackendLoadError(RuntimeError):
    """An artifact cannot be loaded here: missing runtime or GPU, or a graph that contradicts its manifest."""


class Backend(ABC):
    """One loaded artifact. The service calls `infer` from at most `streams` threads at once per model
    (one batch worker each); a runtime that sets `streams` above 1 must allow that many concurrent calls."""

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        # Largest batch `infer` accepts; for a fixed-batch artifact, the batch every call is padded to.
        self.max_batch_size: int = manifest.max_batch_size
        self.dynamic_batch: bool = manifest.dynamic_batch
        # Inferences the runtime runs side by side (OpenVINO streams); the batcher runs one worker each.
        self.streams: int = 1
        # Batch sizes with a graph of their own (OpenVINO's static shapes); warmup runs each of them.
        self.static_batch_sizes: tuple[int, ...] = ()
        # A graph of its own for a lone image on every thread, beside the streams (OpenVINO with streams > 1):
        # `infer(..., solo=True)` runs it (`service.runtime.batching.worker_pool`, "solo").
        self.solo: bool = False
        # Floating-point precision the runtime computes in (f32 | f16 | bf16; for an INT8 artifact, that of
        # the layers left unquantized). Runtimes that can change it set what they read back.
        self.inference_precision: str = _FLOAT_PRECISION.get(manifest.precision, manifest.precision)

    @property
    def linear_batch_times(self) -> bool:
        """Whether every batch size runs on one graph, so a batch's time is about linear in its size and a
        line through the sizes that ran predicts the others (not so with static-shape graphs beside the
        dynamic one: `service.runtime.batching.batch_close.gainful`)."""
        return not self.static_batch_sizes

    @property
    @abstractmethod
    def description(self) -> str:
        """What runs the model, e.g. ``onnxruntime[CPUExecutionProvider]``; shown in /v1/models."""

    @abstractmethod
    def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Run the graph on ``inputs`` (already in the graph's layout and dtype) and return every
        output named in ``manifest.outputs``, batch-first."""

    def _run_solo(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        """`_run` on the solo graph; only a backend that sets `solo` has one."""
        raise BackendError(f"{self.description} has no solo graph")

    def close(self) -> None:  # noqa: B027 - optional hook; most runtimes free memory when collected
        """Release runtime resources; the backend is unusable afterwards."""

    def infer(self, images: np.ndarray, *, solo: bool = False) -> dict[str, np.ndarray]:
        """Run ``images`` (uint8 [B, H, W, 3] RGB at the manifest's input size, 1 <= B <= max_batch_size);
        with ``solo``, one image on the solo graph (the backend must have one: `solo`).

        Returns the output contract for exactly B images. Raises `ValueError` for a bad input (a caller
        bug) and `BackendError` when the graph fails or its outputs break the contract.
        """
        spec = self.manifest.input
        expected = (spec.height, spec.width, 3)
        if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(f"images must be a uint8 [B, H, W, 3] array, got {_describe(images)}")
        if images.shape[1:] != expected:
            raise ValueError(
                f"images must have shape [B, {spec.height}, {spec.width}, 3], got {images.shape}"
            )
        batch = images.shape[0]
        if solo and (not self.solo or batch != 1):
            raise ValueError(f"the solo graph runs one image on a backend that has one, not {batch}")
        if not 1 <= batch <= self.max_batch_size:
            raise ValueError(f"batch of {batch} images; this artifact accepts 1..{self.max_batch_size}")
        if not self.dynamic_batch and batch < self.max_batch_size:
            # A fixed-batch engine only takes exactly max_batch_size images: pad with black images.
            pad = np.zeros((self.max_batch_size - batch, *expected), dtype=np.uint8)
            images = np.concatenate([images, pad])
        try:
            graph_input = self._to_graph_input(images)
            outputs = self._run_solo(graph_input) if solo else self._run(graph_input)
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"inference failed: {type(exc).__name__}: {exc}") from exc
        return self._check_outputs(outputs, padded=images.shape[0], batch=batch)

    def _to_graph_input(self, images: np.ndarray) -> np.ndarray:
        spec = self.manifest.input
        x = images
        if spec.color_order == "BGR":
            x = x[..., ::-1]
        if spec.layout == "NCHW":
            x = x.transpose(0, 3, 1, 2)  # (B, H, W, 3) -> (B, 3, H, W)
        if spec.dtype == "float32":
            x = x.astype(np.float32)  # 0..255; the graph normalizes itself
        return np.ascontiguousarray(x)

    def _check_outputs(
        self, outputs: dict[str, np.ndarray], *, padded: int, batch: int
    ) -> dict[str, np.ndarray]:
        missing = [name for name in self.manifest.outputs if name not in outputs]
        if missing:
            raise BackendError(
                f"model returned no {missing}; the manifest promises {list(self.manifest.outputs)}"
            )
        result: dict[str, np.ndarray] = {}
        for name in self.manifest.outputs:
            value = np.asarray(outputs[name])
            if value.ndim == 0 or value.shape[0] != padded:
                raise BackendError(
                    f"output {name!r} has shape {value.shape}; expected batch dimension {padded}"
                )
            result[name] = value[:batch]

        num = result["num_detections"].reshape(batch, -1)
        boxes = result["detection_boxes"]
        scores = result["detection_scores"]
        classes = result["detection_classes"]
        if num.shape[1] != 1:
            raise BackendError(
                f"num_detections has shape {result['num_detections'].shape}; expected [{batch}, 1]"
            )
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise BackendError(f"detection_boxes has shape {boxes.shape}; expected [B, K, 4]")
        k = boxes.shape[1]
        for name, value in (("detection_scores", scores), ("detection_classes", classes)):
            if value.shape != (batch, k):
                raise BackendError(
                    f"{name} has shape {value.shape}; expected {(batch, k)} to match the boxes"
                )
        # Runtimes differ in integer width (int64 from ONNX TopK, int32 from TensorRT): normalize once here.
        result["num_detections"] = num.astype(np.int32, copy=False)
        result["detection_boxes"] = boxes.astype(np.float32, copy=False)
        result["detection_scores"] = scores.astype(np.float32, copy=False)
        result["detection_classes"] = classes.astype(np.int32, copy=False)
        if MASK_OUTPUT in result:
            masks = result[MASK_OUTPUT]
            if masks.ndim != 4 or masks.shape[:2] != (batch, k):
                raise BackendError(f"{MASK_OUTPUT} has shape {masks.shape}; expected [{batch}, {k}, Mh, Mw]")
            result[MASK_OUTPUT] = masks.astype(np.float32, copy=False)
        return result


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__

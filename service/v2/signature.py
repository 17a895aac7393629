"""A served model as the Open Inference Protocol describes it: input and output tensors, metadata and the
Triton-style configuration that ``tritonclient`` and ``perf_analyzer`` read.

Inputs (exactly one per request; the batch is the first dimension):

- the manifest's input (``images``): ``UINT8 [B, H, W, 3]`` RGB at the network size, what the service
  itself hands the artifact (the graph adapts colour order, layout and dtype);
- ``image_bytes``: ``BYTES [B]`` or ``[B, 1]`` encoded images (JPEG, PNG, ...) that the server decodes
  and resizes; boxes then come back in original-image pixels instead of normalized to the network input.

Outputs: the artifact's contract (`contract.manifest`), K = ``max_detections``.
"""

from __future__ import annotations

from typing import Any

from contract.manifest import MASK_OUTPUT
from service.runtime.loaded_model import LoadedModel
from service.v2.schemas import ModelMetadata, TensorMetadata

BYTES_INPUT = "image_bytes"

# Contract output -> protocol datatype.
OUTPUT_DATATYPES = {
    "num_detections": "INT32",
    "detection_boxes": "FP32",
    "detection_scores": "FP32",
    "detection_classes": "INT32",
    MASK_OUTPUT: "FP32",
}
_PLATFORMS = {"onnx": ("onnxruntime_onnx", "onnxruntime"), "tensorrt": ("tensorrt_plan", "tensorrt")}


def output_dims(model: LoadedModel, name: str) -> list[int]:
    """An output's shape without the batch dimension."""
    k = model.manifest.max_detections
    if name == "num_detections":
        return [1]
    if name == "detection_boxes":
        return [k, 4]
    if name == MASK_OUTPUT:
        mask_h, mask_w = model.manifest.mask_size or (0, 0)
        return [k, mask_h, mask_w]
    return [k]


def model_metadata(model: LoadedModel, versions: list[str]) -> ModelMetadata:
    spec = model.manifest.input
    return ModelMetadata(
        name=model.name,
        versions=versions,
        platform=_PLATFORMS[model.manifest.format][0],
        inputs=[
            TensorMetadata(name=spec.name, datatype="UINT8", shape=[-1, spec.height, spec.width, 3]),
            TensorMetadata(name=BYTES_INPUT, datatype="BYTES", shape=[-1, 1]),
        ],
        outputs=[
            TensorMetadata(name=name, datatype=OUTPUT_DATATYPES[name], shape=[-1, *output_dims(model, name)])
            for name in model.manifest.outputs
        ],
    )


def model_config(model: LoadedModel) -> dict[str, Any]:
    """Triton's model configuration (JSON form): what clients and perf_analyzer read from ``/config``.

    ``image_bytes`` is marked optional: a request sends either it or the network tensor.
    """
    spec = model.manifest.input
    batching = model.batching
    return {
        "name": model.name,
        "platform": _PLATFORMS[model.manifest.format][0],
        "backend": _PLATFORMS[model.manifest.format][1],
        "max_batch_size": batching.max_batch_size,
        "input": [
            {
                "name": spec.name,
                "data_type": "TYPE_UINT8",
                "format": "FORMAT_NHWC",
                "dims": [spec.height, spec.width, 3],
            },
            {"name": BYTES_INPUT, "data_type": "TYPE_STRING", "dims": [1], "optional": True},
        ],
        "output": [
            {"name": name, "data_type": f"TYPE_{OUTPUT_DATATYPES[name]}", "dims": output_dims(model, name)}
            for name in model.manifest.outputs
        ],
        "dynamic_batching": {
            "max_queue_delay_microseconds": round(batching.max_queue_delay_s * 1_000_000),
            "preferred_batch_size": [batching.max_batch_size],
        },
        "parameters": {
            "resize": {"string_value": spec.resize},
            "labels": {"string_value": ",".join(label.name for label in model.manifest.labels)},
            "score_threshold": {"string_value": str(model.manifest.score_threshold)},
        },
    }

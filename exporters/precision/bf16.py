"""The bf16 variant of an fp32 ONNX artifact: an OpenVINO IR that the service runs with
``INFERENCE_PRECISION_HINT=bf16`` (`service.runtime.backends.openvino_backend`).

The graph is the parent's, converted by OpenVINO's own frontend (``openvino.convert_model``), which reads
the project's ONNX unchanged; weights are stored as fp16 (``compress_to_fp16``: half the parent's fp32 bytes,
and the same values where the parent already stores fp16 weights), decompressed to fp32 at load. Only the
CPU plugin's compute-heavy operations run in bf16; decode, scores and NMS keep fp32 arithmetic. Whether that
costs accuracy is what the gate of `exporters.precision.quantize` measures, through the service's backend.
"""

from __future__ import annotations

from pathlib import Path

from contract.manifest import Manifest

IR_FILE = "model.xml"


def write_bf16_variant(parent_path: Path, manifest: Manifest, variant_dir: Path) -> Manifest:
    """Write ``model.xml`` + ``model.bin`` and the manifest (format ``openvino``, precision ``bf16``)."""
    import openvino as ov

    variant_dir.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(parent_path)), str(variant_dir / IR_FILE), compress_to_fp16=True)
    variant = manifest.model_copy(update={"format": "openvino", "file": IR_FILE, "precision": "bf16"})
    variant.write(variant_dir)
    return variant

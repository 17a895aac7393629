"""``detect-export trt`` on an INT8 artifact: an explicit-precision INT8 TensorRT engine from its QDQ ONNX.

The QDQ ONNX written by ``detect-export quantize`` already says which tensors are INT8 (its
QuantizeLinear / DequantizeLinear pairs, scales from calibration), so TensorRT needs no calibrator. Its
unsigned activation quantizers are made signed first (`exporters.precision.nncf_int8.to_signed_int8`:
TensorRT takes INT8 Q/DQ only), then the graph is checked for TensorRT's ONNX parser, built
(`build_engine` with ``int8``) and the engine checked against that signed graph in ONNX Runtime.
Without a GPU the op check runs and `GpuRequiredError` says what was left; nothing is written.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from contract.manifest import Manifest
from exporters.artifact import name_and_version, staged_directory
from exporters.errors import GpuRequiredError, VerificationError
from exporters.manifests import derived_manifest
from exporters.onnx.graph import load_checked
from exporters.precision.nncf_int8 import to_signed_int8
from exporters.tensorrt.config import PLAN_FILE, BuildConfig, TensorRTExportRequest, engine_export_settings
from exporters.tensorrt.engine import build_engine, check_engine, gpu_unavailable_reason
from exporters.tensorrt.ops import check_tensorrt_ops, describe_op_check


def export_int8_engine(request: TensorRTExportRequest, manifest: Manifest, model_path: Path) -> Manifest:
    """Build ``model.plan`` from the INT8 artifact ``manifest`` / ``model_path`` describe; returns the
    manifest written (format tensorrt, precision int8)."""
    qdq = to_signed_int8(load_checked(model_path))
    config = BuildConfig.for_artifact(manifest, request)
    config.validate(qdq)
    ops = check_tensorrt_ops(qdq)
    if not ops["passed"]:
        raise VerificationError(f"the INT8 QDQ graph has ops TensorRT cannot build: {describe_op_check(ops)}")
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GpuRequiredError(
            f"INT8 TensorRT engine not built: {reason}. The QDQ graph {model_path} passed the TensorRT op "
            "check; run the same command on a machine with an NVIDIA GPU to build it. Nothing was written."
        )
    name, version = name_and_version(request.output, request.name, request.version)
    with (
        staged_directory(request.output, force=request.force) as staging,
        tempfile.TemporaryDirectory() as tmp,
    ):
        signed = Path(tmp) / model_path.name
        onnx.save(qdq, str(signed))
        build = build_engine(signed, config, staging / PLAN_FILE, int8=True)
        verification = {"tensorrt_ops": ops, "source": manifest.verification}
        written = derived_manifest(
            manifest,
            name=name,
            version=version,
            export_settings=engine_export_settings(
                request,
                manifest,
                config,
                {"result": build, "precision": "explicit INT8 from the QDQ graph, activations made signed"},
                ("raw_outputs", "postprocess", "calibration", "nncf"),
            ),
            format="tensorrt",
            file=PLAN_FILE,
            unquantized_precision=None,  # an OpenVINO setting: the engine keeps the QDQ graph's fp32 layers
            max_batch_size=config.max_batch,
            dynamic_batch=config.min_batch != config.max_batch,
            verification=verification,
        )
        # Checked as the service will load it: with this manifest.
        engine = check_engine(staging, qdq, written)
        written = written.model_copy(update={"verification": {"engine": engine, **verification}})
        written.write(staging)
    return written

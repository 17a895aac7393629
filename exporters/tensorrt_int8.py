"""``detect-export trt`` on an INT8 artifact: an explicit-precision INT8 TensorRT engine from its QDQ ONNX.

The QDQ ONNX written by ``detect-export quantize`` already says which tensors are INT8 (its
QuantizeLinear / DequantizeLinear pairs, scales from calibration), so TensorRT needs no calibrator: the
graph is checked for TensorRT's ONNX parser, built as it is (`build_engine` with ``int8``) and the engine
checked against the same graph in ONNX Runtime. Without a GPU the op check runs and `GpuRequiredError`
says what was left; nothing is written.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporters.artifact import name_and_version, staged_directory, tool_versions, utc_now
from exporters.errors import GpuRequiredError, VerificationError
from exporters.onnx_graph import load_checked
from service.manifest import Manifest

if TYPE_CHECKING:
    from exporters.tensorrt_build import TensorRTExportRequest


def export_int8_engine(request: TensorRTExportRequest, manifest: Manifest, model_path: Path) -> Manifest:
    from exporters.tensorrt_build import (
        PLAN_FILE,
        BuildConfig,
        _check_engine,
        build_engine,
        check_tensorrt_ops,
        describe_op_check,
        gpu_unavailable_reason,
    )

    qdq = load_checked(model_path)
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
    with staged_directory(request.output, force=request.force) as staging:
        build = build_engine(model_path, config, staging / PLAN_FILE, int8=True)
        engine_check: dict[str, Any] = _check_engine(staging / PLAN_FILE, qdq, manifest)
        export_settings = {
            "command": "detect-export trt",
            "source_artifact": str(request.artifact),
            "source_manifest": {"name": manifest.name, "version": manifest.version},
            "tensorrt_build": {
                **asdict(config),
                "profile_shapes": [list(s) for s in config.shapes()],
                "result": build,
                "precision": "explicit INT8 from the QDQ graph",
            },
            **{
                k: v
                for k, v in manifest.provenance.export_settings.items()
                if k in ("raw_outputs", "postprocess", "calibration", "nncf")
            },
        }
        written = manifest.model_copy(
            update={
                "name": name,
                "version": version,
                "format": "tensorrt",
                "file": PLAN_FILE,
                "max_batch_size": config.max_batch,
                "dynamic_batch": config.min_batch != config.max_batch,
                "provenance": manifest.provenance.model_copy(
                    update={
                        "export_settings": export_settings,
                        "tool_versions": tool_versions(),
                        "created_at": utc_now(),
                    }
                ),
                "verification": {
                    "engine": engine_check,
                    "tensorrt_ops": ops,
                    "source": manifest.verification,
                },
            }
        )
        Manifest.model_validate(written.model_dump())
        written.write(staging)
    return written

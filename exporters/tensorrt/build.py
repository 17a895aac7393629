"""``detect-export trt``: an ONNX artifact -> FP16 ONNX -> strongly typed TensorRT engine (``model.plan``).

The command; what it knows of TensorRT lives beside it: ``exporters.tensorrt.config`` (the request and
the build configuration), ``exporters.tensorrt.ops`` (the ONNX operators its parser accepts, checked on
the graph) and ``exporters.tensorrt.engine`` (the build through the real ``tensorrt`` API, imported only
when a GPU is present, and the engine check through the service's own backend loading). INT8 artifacts
go to ``exporters.tensorrt.int8``.

Steps, in order, everything that needs no GPU first:

1. read the FP32 ONNX artifact and its manifest; validate the build configuration against it;
2. convert to FP16 in the graph (``exporters.precision.fp16``: strong typing takes precision from the ONNX);
3. check every op of both graphs against TensorRT's ONNX operator list (and its constraints);
4. compare FP16 with FP32 in ONNX Runtime on the CPU (raw heads, detections, and COCO AP with data);
5. write the output directory: ``model.fp16.onnx``, and
   - with a GPU: build the engine with the profile and timing cache, run it once against ONNX Runtime,
     write ``model.plan`` + manifest (format tensorrt, precision fp16);
   - without one: write a manifest for the FP16 ONNX (format onnx, precision fp16; servable by ONNX
     Runtime, e.g. its TensorRT execution provider), then stop with :class:`GpuRequiredError`.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import ModelProto

from contract.manifest import Manifest
from exporters.artifact import name_and_version, read_artifact, staged_directory
from exporters.errors import GpuRequiredError, InvalidModelError, OutputExistsError, VerificationError
from exporters.evaluation.verify import raw_names_from_manifest
from exporters.manifests import derived_manifest
from exporters.onnx.graph import load_checked
from exporters.precision.fp16 import convert_to_fp16, fp16_accuracy, fp16_scopes
from exporters.tensorrt.config import (
    FP16_FILE,
    PLAN_FILE,
    BuildConfig,
    TensorRTExportRequest,
    engine_export_settings,
)
from exporters.tensorrt.engine import build_engine, check_engine, gpu_unavailable_reason
from exporters.tensorrt.int8 import export_int8_engine
from exporters.tensorrt.ops import check_tensorrt_ops, describe_op_check


def _fp16_graph(fp32: ModelProto, manifest: Manifest) -> tuple[ModelProto, dict[str, Any]]:
    """The FP16 graph and the TensorRT op check of it; raises VerificationError if either graph fails."""
    raw = raw_names_from_manifest(manifest)
    fp16 = convert_to_fp16(fp32, manifest.input.name, raw, fp16_scopes(manifest))
    ops = {"fp32": check_tensorrt_ops(fp32), "fp16": check_tensorrt_ops(fp16)}
    for which, report in ops.items():
        if not report["passed"]:
            raise VerificationError(
                f"the {which} graph has ops TensorRT cannot build: {describe_op_check(report)}"
            )
    return fp16, ops["fp16"]


def export_tensorrt(request: TensorRTExportRequest) -> Manifest:
    """Run the ``trt`` command (see the module docstring); returns the manifest written.

    Raises:
        GpuRequiredError: after writing the FP16 ONNX artifact, when no GPU is available.
        InvalidModelError / ExportError / OutputExistsError: bad input, before anything is written.
        VerificationError: TensorRT cannot take the graph, or FP16 is out of tolerance; nothing written.
    """
    if request.output.exists() and not request.force:
        raise OutputExistsError(
            f"output directory {request.output} already exists (use --force to replace it)"
        )
    manifest, model_path = read_artifact(request.artifact)
    if manifest.format == "onnx" and manifest.precision == "int8":
        return export_int8_engine(request, manifest, model_path)
    if manifest.format != "onnx" or manifest.precision != "fp32":
        raise InvalidModelError(
            f"{request.artifact} is a {manifest.format}/{manifest.precision} artifact; "
            "trt needs the FP32 ONNX one"
        )
    fp32 = load_checked(model_path)
    config = BuildConfig.for_artifact(manifest, request)
    config.validate(fp32)
    fp16, ops = _fp16_graph(fp32, manifest)
    accuracy = fp16_accuracy(fp32, fp16, manifest, request.data, request.split, request.max_images).to_dict()
    if not accuracy["passed"] and request.verify:
        raise VerificationError(
            f"FP16 is out of tolerance against FP32: {_accuracy_summary(accuracy)} "
            "(nothing written; --no-verify builds anyway and records the accuracy in the manifest)"
        )
    name, version = name_and_version(request.output, request.name, request.version)
    reason = gpu_unavailable_reason()
    with staged_directory(request.output, force=request.force) as staging:
        onnx.save(fp16, str(staging / FP16_FILE))
        if reason is None:
            build: dict[str, Any] = {"result": build_engine(staging / FP16_FILE, config, staging / PLAN_FILE)}
            file, fmt = PLAN_FILE, "tensorrt"
        else:
            build = {"result": f"not built: {reason}"}
            file, fmt = FP16_FILE, "onnx"
        export_settings = engine_export_settings(
            request,
            manifest,
            config,
            build,
            ("raw_outputs", "postprocess"),
            fp16_conversion=(
                "onnxruntime.transformers.float16, network sub-graph only (keep_io_types); pre/post FP32"
            ),
        )
        verification = {"fp16": accuracy, "tensorrt_ops": ops, "source": manifest.verification}
        written = derived_manifest(
            manifest,
            name=name,
            version=version,
            export_settings=export_settings,
            format=fmt,
            precision="fp16",
            file=file,
            max_batch_size=config.max_batch,
            # The FP16 ONNX keeps the dynamic batch; an engine takes what its profile allows.
            dynamic_batch=fmt == "onnx" or config.min_batch != config.max_batch,
            verification=verification,
        )
        if reason is None:  # checked as the service will load it: with this manifest
            engine = check_engine(staging, fp16, written)
            written = written.model_copy(update={"verification": {**verification, "engine": engine}})
        written.write(staging)
    if reason is not None:
        raise GpuRequiredError(
            f"TensorRT engine not built: {reason}. Everything that needs no GPU is done: "
            f"{request.output / FP16_FILE} (FP16 ONNX: checked, all ops TensorRT-supported, accuracy checked "
            "against FP32) with a manifest for it (format onnx, precision fp16). Run the same command with "
            f"--force on a machine with an NVIDIA GPU to build {PLAN_FILE}."
        )
    return written


def _accuracy_summary(report: dict[str, Any]) -> str:
    parts = [f"{n} rel err {r['max_rel_error']:.2e}" for n, r in report["raw_outputs"].items()]
    if "coco" in report:
        parts.append(f"AP fp32 {report['coco']['fp32_ap']:.4f} fp16 {report['coco']['fp16_ap']:.4f}")
    parts += report["contract"]["problems"][:3]
    return "; ".join(parts)

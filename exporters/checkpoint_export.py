"""``detect-export onnx``: checkpoint -> ``model.onnx`` + ``manifest.json``, one pipeline for all models.

Steps: load the checkpoint -> pick its export wrapper (``exporters.onnx.wrappers``) -> export the detection
graph (``exporters.onnx.export``) -> verify against eager PyTorch (unless disabled) -> manifest -> atomic
rename.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnx

from contract.manifest import Manifest
from exporters.artifact import name_and_version, staged_directory
from exporters.errors import ExportError, OutputExistsError, VerificationError
from exporters.evaluation.verify import tolerances_for, verify_model
from exporters.manifests import onnx_manifest
from exporters.onnx.export import (
    DEFAULT_OPSET,
    INPUT_NAME,
    MODEL_FILE,
    export_detection_graph,
    output_names,
    raw_output_names,
)
from exporters.onnx.graph import check, store_weights_fp16, without_outputs
from exporters.onnx.postprocess_graph import PostprocessSettings
from exporters.onnx.wrappers import ExportWrapper, wrapper_for
from training.checkpoint import Checkpoint, sha256_file
from training.weights import load_checkpoint


@dataclass
class OnnxExportRequest:
    """Everything ``detect-export onnx`` takes; None thresholds mean the architecture's defaults."""

    checkpoint: Path
    output: Path
    name: str | None = None
    version: str | None = None
    opset: int = DEFAULT_OPSET
    score_threshold: float | None = None
    iou_threshold: float | None = None
    topk_per_class: int | None = None
    max_detections: int | None = None
    # Global pre-NMS candidates (architectures whose default uses them, e.g. EfficientDet).
    pre_nms_topk: int | None = None
    max_batch_size: int = 32
    verify: bool = True
    force: bool = False
    # "float16" halves the file (weights rounded to fp16, cast back to fp32 in the graph; compute stays fp32).
    weight_storage: Literal["float32", "float16"] = "float32"
    extra_settings: dict[str, Any] = field(default_factory=dict)

    def settings_for(self, wrapper: ExportWrapper) -> PostprocessSettings:
        base = wrapper.default_settings
        return PostprocessSettings(
            score_threshold=base.score_threshold if self.score_threshold is None else self.score_threshold,
            iou_threshold=base.iou_threshold if self.iou_threshold is None else self.iou_threshold,
            topk_per_class=base.topk_per_class if self.topk_per_class is None else self.topk_per_class,
            max_detections=base.max_detections if self.max_detections is None else self.max_detections,
            pre_nms_topk=base.pre_nms_topk if self.pre_nms_topk is None else self.pre_nms_topk,
        )


def _export_settings(
    request: OnnxExportRequest,
    ckpt: Checkpoint,
    wrapper: ExportWrapper,
    settings: PostprocessSettings,
    stats: dict[str, Any],
) -> dict[str, Any]:
    """How the ONNX artifact was made, as its manifest records it."""
    return {
        "command": "detect-export onnx",
        "checkpoint": str(request.checkpoint),
        "checkpoint_epoch": ckpt.epoch,
        "checkpoint_iteration": ckpt.iteration,
        "checkpoint_source": ckpt.source,
        "model_args": ckpt.model_args,
        "opset": request.opset,
        "weight_storage": request.weight_storage,
        "exporter": "torch.onnx.export (TorchScript, dynamo=False)",
        "simplifier": "onnxslim",
        "postprocess": {**settings.to_dict(), "nms": "ONNX NonMaxSuppression, per class"},
        "raw_outputs": raw_output_names(wrapper),
        "fp16_scopes": list(wrapper.fp16_scopes),
        "mean": list(wrapper.mean_std[0]),
        "std": list(wrapper.mean_std[1]),
        **stats,
        **request.extra_settings,
    }


def export_onnx(request: OnnxExportRequest) -> Manifest:
    """Run the whole ``onnx`` command; returns the written manifest.

    Raises:
        CheckpointError / UnsupportedArchitectureError / OutputExistsError / InvalidModelError: bad input,
            detected before anything is written.
        VerificationError: the graph does not match eager PyTorch; nothing is written.
    """
    if request.output.exists() and not request.force:
        # Checked first too (staged_directory checks again) so a bad call fails before the slow export.
        raise OutputExistsError(
            f"output directory {request.output} already exists (use --force to replace it)"
        )
    ckpt = load_checkpoint(request.checkpoint)
    wrapper = wrapper_for(ckpt)
    settings = request.settings_for(wrapper)
    try:
        wrapper.check_settings(settings)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc
    if request.max_batch_size < 1:
        raise ExportError(f"--max-batch must be >= 1, got {request.max_batch_size}")
    name, version = name_and_version(request.output, request.name, request.version)
    checkpoint_sha = sha256_file(request.checkpoint)

    model_with_raw, stats = export_detection_graph(wrapper, settings, request.opset)
    if request.weight_storage == "float16":
        model_with_raw = store_weights_fp16(model_with_raw)
        check(model_with_raw, "the graph with float16 weight storage")
    raw_names = raw_output_names(wrapper)
    artifact_model = without_outputs(model_with_raw, raw_names)
    check(artifact_model, "the artifact graph")

    verification: dict[str, Any] = {"skipped": "--no-verify"}
    if request.verify:
        verification = verify_model(
            artifact_model, wrapper, settings, raw_names, tolerances=tolerances_for(request.weight_storage)
        ).to_dict()
        if not verification["passed"]:
            raise VerificationError(
                f"exported graph does not match eager PyTorch: {verification['summary']} "
                "(nothing written; --no-verify exports without this check)"
            )

    manifest = onnx_manifest(
        wrapper,
        settings,
        ckpt,
        identity=(name, version),
        file=MODEL_FILE,
        input_name=INPUT_NAME,
        outputs=tuple(output_names(wrapper)),
        max_batch_size=request.max_batch_size,
        checkpoint_sha256=checkpoint_sha,
        export_settings=_export_settings(request, ckpt, wrapper, settings, stats),
        verification=verification,
    )
    with staged_directory(request.output, force=request.force) as staging:
        onnx.save(artifact_model, str(staging / MODEL_FILE))
        manifest.write(staging)
    return manifest

"""``detect-export onnx``: checkpoint -> ``model.onnx`` + ``manifest.json``, one pipeline for all models.

Steps: load the checkpoint -> pick its export wrapper (``exporters.onnx.wrappers``) -> assemble
``DetectionGraph`` (uint8 NHWC input, in-graph normalization, network, decoder, NMS post-processing) ->
export with dynamic batch -> simplify (onnxslim: constant folding, dead-code removal) -> ONNX checker with
strict shape inference -> verify against eager PyTorch (unless disabled) -> manifest -> atomic rename.

Exporter choice: the TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``).
torch 2.14's default dynamo exporter needs ``onnxscript`` (not in this project's pinned export stack) and
would need NonMaxSuppression as a ``torch.library`` custom op with a fake kernel for its data-dependent
output size plus a custom translation; the TorchScript exporter maps one ``autograd.Function.symbolic``
to one ONNX node. It exports the ResNet-18 SSD300 in ~2 s with outputs within ~1e-6 of eager. It is
deprecated in torch; moving to dynamo means replacing ``postprocess_graph._NonMaxSuppression`` only.

The exported graph also carries the raw head outputs as named intermediate tensors
(``raw_<name>``); the artifact does not output them, but verification and FP16 checks expose them
(``exporters.onnx.graph.with_outputs``) to compare the network itself, not only the detections.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
import onnxslim
import torch
from onnx import ModelProto
from torch import Tensor, nn

from contract.manifest import MASK_OUTPUT, OUTPUT_NAMES, Manifest
from exporters.artifact import name_and_version, staged_directory
from exporters.errors import ExportError, OutputExistsError, VerificationError
from exporters.evaluation.verify import tolerances_for, verify_model
from exporters.manifests import onnx_manifest
from exporters.onnx.graph import check, ensure_node_names, op_counts, store_weights_fp16, without_outputs
from exporters.onnx.postprocess_graph import DetectionPostprocess, PostprocessSettings
from exporters.onnx.wrappers import ExportWrapper, get_wrapper
from training.checkpoint import Checkpoint, load_checkpoint, sha256_file

MODEL_FILE = "model.onnx"
INPUT_NAME = "images"
DEFAULT_OPSET = 17
RAW_PREFIX = "raw_"


class DetectionGraph(nn.Module):
    """uint8 ``[B, H, W, 3]`` RGB -> the output contract (plus the raw head outputs when asked)."""

    def __init__(
        self, wrapper: ExportWrapper, settings: PostprocessSettings, raw_outputs: bool = True
    ) -> None:
        super().__init__()
        self.preprocess = wrapper.preprocess()
        self.network = wrapper.network
        self.decoder = wrapper.decoder()
        self.postprocess = DetectionPostprocess(settings, wrapper.num_classes, wrapper.num_anchors)
        self.masks = wrapper.mask_head()
        self.raw_outputs = raw_outputs

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        raw = self.network(self.preprocess(images))
        raw = tuple(raw) if isinstance(raw, tuple | list) else (raw,)
        outputs = self.postprocess(*self.decoder(*raw))
        if self.masks is not None:  # mask models: detection_masks from the raw outputs and the detections
            outputs = (*outputs, self.masks(raw, outputs))
        return (*outputs, *raw) if self.raw_outputs else outputs


def output_names(wrapper: ExportWrapper) -> list[str]:
    """The contract outputs of ``wrapper``'s graph: the four detection outputs, plus masks if it has them."""
    return [*OUTPUT_NAMES, *((MASK_OUTPUT,) if wrapper.mask_size is not None else ())]


def raw_output_names(wrapper: ExportWrapper) -> list[str]:
    return [RAW_PREFIX + name for name in wrapper.raw_output_names]


def torch_to_onnx(
    module: nn.Module,
    example: tuple[Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    opset: int,
) -> ModelProto:
    """Export ``module`` with the TorchScript exporter, dimension 0 of every input and output dynamic."""
    dynamic_axes = {name: {0: "batch"} for name in (*input_names, *output_names)}
    with (
        tempfile.TemporaryDirectory(prefix="detect-export-") as tmp,
        warnings.catch_warnings(),
        torch.no_grad(),
    ):
        # The TorchScript exporter is chosen deliberately (see the module docstring); torch announces its
        # deprecation with these two warnings on every call.
        warnings.filterwarnings(
            "ignore", "You are using the legacy TorchScript-based ONNX export", DeprecationWarning
        )
        warnings.filterwarnings("ignore", "The feature will be removed", DeprecationWarning, r"torch\.onnx")
        # training's models validate input shapes with Python `if`s; traced they become constants, which is
        # right: the exported graph's channels and spatial size are fixed, only the batch is dynamic.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"training\.")
        # torchvision's detection box coder creates its 0.5 with torch.tensor: a constant, as it should be.
        warnings.filterwarnings(
            "ignore", category=torch.jit.TracerWarning, module=r"torchvision\.models\.detection\._utils"
        )
        path = Path(tmp) / "exported.onnx"
        torch.onnx.export(
            module,
            example,
            path,
            dynamo=False,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
        )
        return onnx.load(str(path))


def simplify(model: ModelProto) -> ModelProto:
    """onnxslim's constant folding and dead-code elimination, keeping every graph input/output name."""
    slimmed = onnxslim.slim(model)
    if not isinstance(slimmed, ModelProto):
        raise ExportError(f"onnxslim returned {type(slimmed).__name__}, not a model")
    ensure_node_names(slimmed)
    return slimmed


def example_images(wrapper: ExportWrapper, batch: int = 2, seed: int = 0) -> Tensor:
    height, width = wrapper.input_size
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, size=(batch, height, width, 3), dtype=np.uint8))


def export_detection_graph(
    wrapper: ExportWrapper, settings: PostprocessSettings, opset: int = DEFAULT_OPSET
) -> tuple[ModelProto, dict[str, Any]]:
    """The checked, simplified detector graph **with** the raw head outputs, and export statistics.

    Drop the raw outputs (``onnx_graph.without_outputs``) to get the artifact graph.
    """
    graph = DetectionGraph(wrapper, settings, raw_outputs=True).eval()
    raw_names = raw_output_names(wrapper)
    started = time.perf_counter()
    exported = torch_to_onnx(
        graph, (example_images(wrapper),), [INPUT_NAME], [*output_names(wrapper), *raw_names], opset
    )
    export_seconds = time.perf_counter() - started
    nodes_exported = len(exported.graph.node)
    model = simplify(exported)
    check(model, "the exported graph")
    stats = {
        "export_seconds": round(export_seconds, 3),
        "nodes_exported": nodes_exported,
        "nodes_simplified": len(model.graph.node),
        "op_counts": op_counts(model),
    }
    return model, stats


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
    wrapper = get_wrapper(ckpt.model_name)(ckpt)
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

"""``detect-export quantize``: INT8 (NNCF post-training quantization) and bf16 variants of an fp32 artifact,
each accepted only if its COCO AP, served as the service serves it, stays within a gate of the parent's.

INT8: NNCF's ``nncf.quantize`` on the ONNX graph, calibrated on images of a COCO-format split decoded and
resized by the service's own functions (`exporters.evaluation.served_eval.served_batches`), so the
calibration sees
the pixels the model will be served. What stays fp32 (the ignored scope, :func:`ignored_scope`):

- the input preprocessing (cast, mean/std, transpose: everything before the first Conv);
- everything downstream of the raw head outputs: box decoding, score activations (softmax / sigmoid),
  TopK, NonMaxSuppression, mask sigmoid, padding (`exporters.precision.fp16.split_nodes`);
- the numerically sensitive op types wherever they occur (`exporters.precision.fp16.SENSITIVE_OP_TYPES`);
- each architecture's own list (`ExportWrapper.int8_ignored_patterns`): EfficientDet's BiFPN fusion
  weights, Mask R-CNN's RoI heads.

The result is a QDQ ONNX (QuantizeLinear / DequantizeLinear pairs, weights stored as int8) that ONNX
Runtime, OpenVINO and TensorRT (explicit precision) all run; docs/quantization.md gives the measurements
behind that choice.

``--unquantized-precision bf16`` (INT8 only) records in the manifest that OpenVINO is to run the layers
left in floating point (Mask R-CNN's RoI heads, say) in bf16 rather than f32; the gate measures it so.

bf16: the parent's graph as an OpenVINO IR with manifest precision ``bf16`` (`exporters.precision.bf16`): the
service's OpenVINO backend runs it with ``INFERENCE_PRECISION_HINT=bf16``, and the gate evaluates it there.

The gate: the variant's box AP (and mask AP for mask models) on the validation split may fall at most
``max_ap_drop`` below the parent's; otherwise nothing is written and `AccuracyGateError` says by how much
and which flags exist (``--accuracy-control``: NNCF's accuracy-controlled quantization, which keeps the
most harmful layers in fp32 until the drop fits; ``--no-accuracy-gate`` writes it anyway).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnx

from contract.manifest import MANIFEST_FILE, Accuracy, Manifest, Parent
from exporters.artifact import read_artifact, staged_directory, tool_versions, utc_now
from exporters.errors import ExportError, InvalidModelError, VerificationError
from exporters.evaluation.golden import write_artifact_golden
from exporters.evaluation.served_eval import served_batches, served_metrics, split_image_ids
from exporters.manifests import derived_manifest
from exporters.onnx.graph import ensure_node_names, load_checked, restore_weights_fp32
from exporters.precision.gate import accuracy_record, by_isa, gate_failures, measure_by_class, metric_ap
from exporters.precision.nncf_int8 import (
    DEFAULT_OVERFLOW_FIX,
    NNCF_SETTINGS,
    OverflowFixMode,
    advanced_parameters,
    calibration_files,
    ignored_scope,
    nncf_ignored_scope,
    quantize_int8,
    store_kept_weights_fp16,
)
from training.checkpoint import sha256_file

Precision = Literal["int8", "bf16"]
DEFAULT_MAX_AP_DROP = 0.005


class AccuracyGateError(VerificationError):
    """The variant lost more AP than the gate allows (nothing was written)."""


@dataclass(frozen=True)
class QuantizeRequest:
    artifact: Path  # the fp32 ONNX parent
    output: Path  # models/<name>/<version> of the variant
    data: str  # COCO-format folder: calibration and validation images
    precision: Precision = "int8"
    # int8: the precision OpenVINO runs the unquantized layers in (manifest ``unquantized_precision``)
    unquantized_precision: Literal["f32", "bf16"] | None = None
    calibration_split: str = "train"
    calibration_images: int = 300
    seed: int = 0
    val_split: str | None = None  # default: val / val2017
    max_eval_images: int | None = None
    max_ap_drop: float = DEFAULT_MAX_AP_DROP
    gate: bool = True
    accuracy_control: bool = False
    ranking_images: int = 50  # --accuracy-control: images NNCF ranks the quantizer groups on
    backend: str = "auto"  # DETECT_BACKEND the gate evaluates INT8 with (the service's factory)
    dataset_description: str | None = None  # recorded as accuracy.dataset (default: the data folder)
    name: str | None = None
    version: str | None = None
    force: bool = False
    nncf_options: dict[str, Any] = field(default_factory=dict)
    overflow_fix: OverflowFixMode = DEFAULT_OVERFLOW_FIX  # NNCF's, docs/quantization.md
    # The CPU classes the gate measures an OpenVINO variant under (None: every one this machine reaches)
    cpu_classes: list[str] | None = None


def quantize_int8_with_accuracy_control(
    model: onnx.ModelProto,
    manifest: Manifest,
    images_dir: Path,
    files: list[tuple[int, str]],
    scope: dict[str, list[str]],
    request: QuantizeRequest,
    work: Path,
) -> onnx.ModelProto:
    """NNCF's accuracy-controlled quantization: layers are returned to fp32, most harmful first, until the
    served box AP on the validation split is within ``max_ap_drop`` of the fp32 model's.

    NNCF's data items are the validation image ids. Each candidate is evaluated as the service would serve
    it (as written, through ``--backend``'s INT8 choice) on exactly the ids
    NNCF passes, and each image's own AP comes back with the total: NNCF ranks the quantizer groups on
    the ``ranking_images`` images whose AP the full INT8 model changed most, then reverts groups one by
    one, checking the whole split.
    """
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    nncf.set_log_level(logging.WARNING)
    batches = [images for images, _, _ in served_batches(manifest, images_dir, files, 1)]
    calibration = nncf.Dataset(batches, lambda images: {manifest.input.name: images})
    candidate = work / "candidate"
    val_ids = split_image_ids(request.data, request.val_split, request.max_eval_images)

    def validate(candidate_model: onnx.ModelProto, items: Any) -> tuple[float, list[float]]:
        served = onnx.ModelProto()
        served.CopyFrom(candidate_model)
        if any(node.op_type == "QuantizeLinear" for node in served.graph.node):
            int8 = manifest.model_copy(
                update={"precision": "int8", "unquantized_precision": request.unquantized_precision}
            )
            _write_variant(served, int8, candidate)
        else:  # NNCF validates the fp32 model too
            _write_variant(served, manifest, candidate)
        ids = [int(i) for i in items]
        metrics = served_metrics(
            candidate, request.data, request.val_split, backend=request.backend, image_ids=ids, per_image=True
        )
        return float(metrics["bbox"]["AP"]), [metrics["per_image_box_ap"][i] for i in ids]

    quantized: onnx.ModelProto = nncf.quantize_with_accuracy_control(
        model,
        calibration_dataset=calibration,
        validation_dataset=nncf.Dataset(val_ids),
        validation_fn=validate,
        max_drop=request.max_ap_drop,
        drop_type=nncf.DropType.ABSOLUTE,
        subset_size=len(batches),
        ignored_scope=nncf_ignored_scope(scope),
        advanced_quantization_parameters=advanced_parameters(request.overflow_fix),
        advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(
            ranking_subset_size=request.ranking_images
        ),
    )
    return quantized


def _write_variant(model: onnx.ModelProto, manifest: Manifest, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / manifest.file))
    manifest.write(directory)


# ------------------------------------------------------------------------------------------ records


def record_accuracy(
    artifact: Path,
    data: str,
    split: str | None,
    backend: str,
    max_images: int | None,
    description: str | None,
    write: bool,
    cpu_classes: list[str] | None = None,
) -> Accuracy:
    """``detect-export eval``: the artifact's served AP, recorded as its manifest's ``accuracy`` (with each
    CPU class's for an OpenVINO artifact, `exporters.precision.gate.measure_by_class`)."""
    manifest, _ = read_artifact(artifact)
    metrics = served_metrics(artifact, data, split, backend=backend, max_images=max_images)
    classes = measure_by_class(artifact, metrics, data, split, backend, max_images, cpu_classes)
    accuracy = Accuracy(
        dataset=description or data,
        split=str(metrics["split"]),
        images=int(metrics["images"]),
        annotations_sha256=str(metrics["annotations_sha256"]),
        runtime=str(metrics["runtime"]),
        box_ap=float(metrics["bbox"]["AP"]),
        mask_ap=metric_ap(metrics, "segm"),
        measured_at=utc_now(),
        by_isa=by_isa(classes, None, None),
    )
    if write:
        quality = metrics["detections"].quality(manifest.default_threshold)
        manifest.model_copy(update={"accuracy": accuracy, "quality": quality}).write(artifact)
    return accuracy


# ------------------------------------------------------------------------------------------ the command


def _variant_manifest(
    parent: Manifest,
    parent_path: Path,
    request: QuantizeRequest,
    name: str,
    version: str,
    settings: dict[str, Any],
) -> Manifest:
    export_settings = {
        "command": "detect-export quantize",
        "parent_export_settings": parent.provenance.export_settings,
        **settings,
    }
    versions = tool_versions()
    for dist in ("nncf", "openvino"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    return derived_manifest(
        parent,
        name=name,
        version=version,
        export_settings=export_settings,
        tools=versions,
        precision=request.precision,
        unquantized_precision=request.unquantized_precision,
        parent=Parent(name=parent.name, version=parent.version, file_sha256=sha256_file(parent_path)),
        verification={},
        metrics={},
        accuracy=None,
    )


def quantize_artifact(request: QuantizeRequest) -> Manifest:
    """Write the variant to ``request.output`` if it passes the gate (see the module docstring)."""
    from exporters.artifact import name_and_version

    parent, parent_path = read_artifact(request.artifact)
    if parent.format != "onnx" or parent.precision != "fp32":
        raise InvalidModelError(
            f"{request.artifact} is a {parent.format}/{parent.precision} artifact; "
            "quantize needs an fp32 ONNX one"
        )
    if request.unquantized_precision is not None and request.precision != "int8":
        raise ExportError("--unquantized-precision applies to --precision int8 only")
    if request.max_ap_drop < 0:
        raise ExportError(f"--max-ap-drop must be >= 0, got {request.max_ap_drop}")
    name, version = name_and_version(request.output, request.name, request.version)
    if request.output.exists() and not request.force:
        raise ExportError(f"output directory {request.output} already exists (use --force to replace it)")

    with tempfile.TemporaryDirectory(prefix="quantize-") as tmp:
        work = Path(tmp)
        if request.precision == "int8":
            variant_dir, _ = _make_int8(request, parent, parent_path, name, version, work)
        else:
            from exporters.precision.bf16 import write_bf16_variant

            variant_dir = work / "variant"
            settings = {"format": "OpenVINO IR, fp16-stored weights, run with INFERENCE_PRECISION_HINT=bf16"}
            manifest = _variant_manifest(parent, parent_path, request, name, version, settings)
            write_bf16_variant(parent_path, manifest, variant_dir)
        variant_metrics, accuracy = _gate(request, variant_dir)
        display = variant_metrics.get("display_threshold")
        manifest = Manifest.read(variant_dir).model_copy(
            update={
                "accuracy": accuracy,
                "display_score_threshold": display["threshold"] if display else None,
                "metrics": {"display_threshold": display} if display else {},
            }
        )
        quality = variant_metrics["detections"].quality(manifest.default_threshold)
        manifest = manifest.model_copy(update={"quality": quality})
        manifest = write_artifact_golden(
            variant_dir, request.data, request.val_split, backend=request.backend, manifest=manifest
        )
        with staged_directory(request.output, force=request.force) as staging:
            for path in variant_dir.iterdir():  # the model file (and an IR's weights)
                if path.name != "manifest.json":
                    shutil.copyfile(path, staging / path.name)
            manifest.write(staging)
        return manifest


def _gate(request: QuantizeRequest, variant_dir: Path) -> tuple[dict[str, Any], Accuracy]:
    """The variant's served metrics and its accuracy record against the parent's, under every CPU class
    (`exporters.precision.gate`); raises `AccuracyGateError` when it loses too much under any."""

    def measured(artifact: Path) -> dict[str, Any]:  # as served, on the gate's validation images
        return served_metrics(
            artifact,
            request.data,
            request.val_split,
            backend=request.backend,
            max_images=request.max_eval_images,
        )

    variant_metrics = measured(variant_dir)
    parent_metrics = measured(request.artifact)
    classes = measure_by_class(
        variant_dir,
        variant_metrics,
        request.data,
        request.val_split,
        request.backend,
        request.max_eval_images,
        request.cpu_classes,
    )
    accuracy = accuracy_record(
        variant_metrics,
        parent_metrics,
        dataset=request.dataset_description or request.data,
        max_ap_drop=request.max_ap_drop if request.gate else None,
        int8=request.precision == "int8",
        classes=classes,
    )
    failures = gate_failures(accuracy, request.max_ap_drop)
    if failures and request.gate:
        hint = (
            "try --accuracy-control (NNCF accuracy-controlled quantization), more or other calibration "
            "images, or "
            if request.precision == "int8" and not request.accuracy_control
            else ""
        )
        raise AccuracyGateError(
            f"the {request.precision} variant loses more than --max-ap-drop {request.max_ap_drop} on "
            f"{accuracy.images} images of {request.data} split {accuracy.split}: {'; '.join(failures)}. "
            f"Nothing was written; {hint}pass --no-accuracy-gate to write it anyway"
        )
    return variant_metrics, accuracy


def _make_int8(
    request: QuantizeRequest, parent: Manifest, parent_path: Path, name: str, version: str, work: Path
) -> tuple[Path, str]:
    import nncf

    model = restore_weights_fp32(load_checked(parent_path))
    ensure_node_names(model)
    scope = ignored_scope(model, parent)
    images_dir, files = calibration_files(
        request.data, request.calibration_split, request.calibration_images, request.seed
    )
    if request.accuracy_control:
        quantized = quantize_int8_with_accuracy_control(
            model, parent, images_dir, files, scope, request, work
        )
    else:
        quantized = quantize_int8(
            model, parent, images_dir, files, scope, request.nncf_options, request.overflow_fix
        )
    weight_storage = parent.provenance.export_settings.get("weight_storage", "float32")
    if weight_storage == "float16":
        quantized = store_kept_weights_fp16(quantized)
    settings = {
        "calibration": {
            "data": request.data,
            "split": request.calibration_split,
            "images": len(files),
            "selection": f"numpy default_rng({request.seed}).choice of the split's image ids, "
            "without replacement",
            "seed": request.seed,
            "preprocessing": "service.imaging.decoding.decode_image + contract.geometry.resize_for_network",
        },
        "nncf": {
            "version": nncf.__version__,
            "function": "quantize_with_accuracy_control" if request.accuracy_control else "quantize",
            "subset_size": len(files),
            "settings": NNCF_SETTINGS,
            "options": request.nncf_options,
            "overflow_fix": request.overflow_fix,
            "ignored_scope": {
                "names": len(scope["names"]),
                "patterns": scope["patterns"],
                "types": scope["types"],
            },
        },
        "format": "QDQ ONNX (QuantizeLinear/DequantizeLinear, int8 weights)",
        "unquantized_weight_storage": weight_storage,  # the ignored scope's weights, stored as the parent's
    }
    variant_dir = work / "variant"
    _write_variant(
        quantized, _variant_manifest(parent, parent_path, request, name, version, settings), variant_dir
    )
    load_checked(variant_dir / parent.file)  # the ONNX checker with strict shape and type inference
    return variant_dir, "pending"


__all__ = [
    "DEFAULT_MAX_AP_DROP",
    "MANIFEST_FILE",
    "AccuracyGateError",
    "QuantizeRequest",
    "quantize_artifact",
]

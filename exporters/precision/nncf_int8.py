"""INT8 graphs with NNCF: what stays fp32 (the ignored scope), which images calibrate, and the rewrites
between NNCF's unsigned activation quantizers and signed INT8 ones (TensorRT's explicit quantization
takes only INT8; OpenVINO runs signed activations as INT8 only on AMX, docs/quantization.md).

`exporters.precision.quantize` puts these together behind the accuracy gate; docs/quantization.md gives the
reasons.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from contract.manifest import Manifest
from exporters.errors import ExportError, InvalidModelError
from exporters.evaluation.served_eval import served_batches
from exporters.precision.fp16 import SENSITIVE_OP_TYPES, split_nodes

# ------------------------------------------------------------------------------------------ ignored scope


def ignored_scope(model: onnx.ModelProto, manifest: Manifest) -> dict[str, list[str]]:
    """``{"names", "patterns", "types"}`` of the nodes that stay fp32 (module docstring)."""
    from exporters.evaluation.verify import raw_names_from_manifest
    from exporters.onnx.wrappers import get_wrapper

    raw = raw_names_from_manifest(manifest)
    # No fp16 scopes: a two-stage detector's RoI heads count as post-processing here, so they stay fp32.
    pre, _, post = split_nodes(model, manifest.input.name, raw)
    names = sorted(model.graph.node[i].name for i in pre + post)
    patterns = list(get_wrapper(manifest.architecture).int8_ignored_patterns)
    return {"names": names, "patterns": patterns, "types": list(SENSITIVE_OP_TYPES)}


def nncf_ignored_scope(scope: dict[str, list[str]]) -> Any:
    import nncf

    return nncf.IgnoredScope(
        names=scope["names"], patterns=scope["patterns"], types=scope["types"], validate=False
    )


# ------------------------------------------------------------------------------------------ calibration


def calibration_files(data: str, split: str, count: int, seed: int) -> tuple[Path, list[tuple[int, str]]]:
    """``count`` images of the split, drawn without replacement by ``seed`` (all of them if fewer)."""
    from training.data.coco import load_coco, resolve_split

    images_dir, annotation_file = resolve_split(data, split)
    coco = load_coco(annotation_file)
    ids = sorted(coco.getImgIds())
    if not ids:
        raise ExportError(f"calibration split {split!r} of {data} has no images")
    if count < len(ids):
        ids = sorted(np.random.default_rng(seed).choice(ids, size=count, replace=False).tolist())
    return Path(images_dir), [(int(i), str(coco.imgs[i]["file_name"])) for i in ids]


def _quantizer_pairs(model: onnx.ModelProto, zero_type: int, inputs: set[str] | None) -> set[tuple[str, str]]:
    """``(scale, zero point)`` initializer names of the activation quantizers (a QuantizeLinear on a computed
    tensor; weights have a DequantizeLinear only) whose zero point has ``zero_type``, restricted to those
    quantizing one of ``inputs`` when given."""
    inits = {init.name: init for init in model.graph.initializer}
    pairs = set()
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or len(node.input) != 3 or node.input[0] in inits:
            continue
        zero_point = inits.get(node.input[2])
        wanted = inputs is None or node.input[0] in inputs
        if zero_point is not None and zero_point.data_type == zero_type and wanted:
            pairs.add((node.input[1], node.input[2]))
    return pairs


def _retype_quantizers(
    model: onnx.ModelProto, pairs: set[tuple[str, str]], zero_type: int, scale_factor: float
) -> onnx.ModelProto:
    """Every Q/DQ using one of ``pairs`` made ``zero_type``, its scale times ``scale_factor``, in place."""
    from onnx import helper, numpy_helper

    inits = {init.name: init for init in model.graph.initializer}
    zero_names = {zero for _, zero in pairs}
    quantized_outputs = {
        node.output[0]
        for node in model.graph.node
        if node.op_type == "QuantizeLinear" and len(node.input) == 3 and node.input[2] in zero_names
    }
    for info in model.graph.value_info:
        if info.name in quantized_outputs or info.name in zero_names:  # initializers may have one too
            info.type.tensor_type.elem_type = zero_type
    for zero_name in sorted(zero_names):
        zero = numpy_helper.to_array(inits[zero_name])
        if zero.any():
            raise InvalidModelError(
                f"quantizer {zero_name} is asymmetric (zero point != 0); cannot retype it"
            )
        dtype = helper.tensor_dtype_to_np_dtype(zero_type)
        inits[zero_name].CopyFrom(numpy_helper.from_array(zero.astype(dtype), zero_name))
    for scale_name in sorted({scale for scale, _ in pairs}):
        scale = numpy_helper.to_array(inits[scale_name])
        inits[scale_name].CopyFrom(
            numpy_helper.from_array((scale * scale_factor).astype(scale.dtype), scale_name)
        )
    return model


def to_signed_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same QDQ graph with every UINT8 activation quantizer made INT8, in place: what TensorRT's
    explicit quantization takes (`exporters.tensorrt.int8` applies it when it builds an engine).

    NNCF quantizes non-negative activations (after ReLU) as UINT8 with zero point 0; TensorRT takes only
    INT8 Q/DQ with zero point 0 (its op check refuses UINT8). A UINT8 quantizer of scale ``s`` covers
    [0, 255 s]; INT8 with scale ``255 s / 127`` covers the same range, one bit coarser. The served
    artifact keeps NNCF's UINT8 quantizers: OpenVINO's CPU plugin runs signed activations as INT8 only on
    AMX (and AVX2-VNNI-2) CPUs and elsewhere computes a different, much worse answer
    (docs/quantization.md, "The same answers on every CPU").
    """
    from onnx import TensorProto

    return _retype_quantizers(
        model, _quantizer_pairs(model, TensorProto.UINT8, None), TensorProto.INT8, 255.0 / 127.0
    )


def to_unsigned_activations(model: onnx.ModelProto, nonnegative: set[str]) -> onnx.ModelProto:
    """The inverse of `to_signed_int8`, in place: the INT8 activation quantizers of the tensors in
    ``nonnegative`` made UINT8 again with scale ``127 s / 255`` (NNCF's own choice for a tensor that is
    never negative on the calibration images). For INT8 artifacts written with signed activations."""
    from onnx import TensorProto

    pairs = _quantizer_pairs(model, TensorProto.INT8, nonnegative)
    return _retype_quantizers(model, pairs, TensorProto.UINT8, 127.0 / 255.0)


def store_kept_weights_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The float32 weights INT8 leaves in place (the ignored scope's layers) stored as float16, as a parent
    exported with ``--weight-storage float16`` stores them: exact, since they are that parent's float16
    values. Quantizer scales and zero points stay initializers of their own type (TensorRT's explicit
    quantization needs them constant)."""
    from exporters.onnx.graph import store_weights_fp16

    quantizers = ("QuantizeLinear", "DequantizeLinear")
    keep = {name for node in model.graph.node if node.op_type in quantizers for name in node.input}
    return store_weights_fp16(model, keep=keep)


OverflowFixMode = Literal["enable", "first_layer_only", "disable"]
# Weights in 7 bits everywhere: without VNNI (AVX2) OpenVINO sums pairs of u8 x s8 products in saturating
# int16 (vpmaddubsw), which 8-bit weights overflow; EfficientDet-D0 lost 0.0145 AP there with NNCF's default
# (first layer only) and nothing measurable elsewhere with this (docs/quantization.md).
DEFAULT_OVERFLOW_FIX: OverflowFixMode = "enable"


def advanced_parameters(overflow_fix: OverflowFixMode) -> Any:
    """NNCF's ``AdvancedQuantizationParameters`` with its ``overflow_fix``."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    return AdvancedQuantizationParameters(overflow_fix=OverflowFix(overflow_fix))


NNCF_SETTINGS = {
    "preset": "nncf default (PERFORMANCE: symmetric weights and activations)",
    "activations": "NNCF's own: UINT8 where the calibration images never make them negative (after ReLU), "
    "INT8 elsewhere",
    "weights": "INT8 per channel (nncf default), in the 7-bit range where overflow_fix says so",
    "fast_bias_correction": True,
}


def quantize_batches(
    model: onnx.ModelProto,
    manifest: Manifest,
    batches: list[np.ndarray],
    scope: dict[str, list[str]],
    options: dict[str, Any] | None = None,
    overflow_fix: OverflowFixMode = DEFAULT_OVERFLOW_FIX,
) -> onnx.ModelProto:
    """NNCF post-training quantization of ``model`` calibrated on uint8 network inputs ``batches``."""
    import nncf

    nncf.set_log_level(logging.WARNING)
    dataset = nncf.Dataset(batches, lambda images: {manifest.input.name: images})
    quantized: onnx.ModelProto = nncf.quantize(
        model,
        dataset,
        subset_size=len(batches),
        ignored_scope=nncf_ignored_scope(scope),
        advanced_parameters=advanced_parameters(overflow_fix),
        **(options or {}),
    )
    return quantized


def quantize_int8(
    model: onnx.ModelProto,
    manifest: Manifest,
    images_dir: Path,
    files: list[tuple[int, str]],
    scope: dict[str, list[str]],
    options: dict[str, Any],
    overflow_fix: OverflowFixMode = DEFAULT_OVERFLOW_FIX,
) -> onnx.ModelProto:
    """`quantize_batches` calibrated on ``files`` decoded and resized as the service does."""
    batches = [images for images, _, _ in served_batches(manifest, images_dir, files, 1)]
    return quantize_batches(model, manifest, batches, scope, options, overflow_fix)

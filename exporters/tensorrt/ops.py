"""Can TensorRT's ONNX parser take a graph? Its operator list, its constraints on the ops this project's
graphs use (TopK, NonMaxSuppression, reductions) and the tensor types it has no kernels for.

Runs on the ONNX alone (no GPU, no TensorRT installed), so an export learns before any build whether
the engine can exist.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, numpy_helper

from exporters.onnx.graph import op_counts, tensor_elem_types
from exporters.onnx.postprocess_graph import TENSORRT_MAX_TOPK

# ONNX operators (default domain) the TensorRT 10.x ONNX parser supports (onnx-tensorrt
# docs/operators.md, TensorRT 10.x; opsets 9 and up). NonMaxSuppression maps to INMSLayer (>= 8.5),
# RoiAlign is supported from 8.5. Constraints checked separately: see `_constraint_problems`.
_TENSORRT_ONNX_OPS_TABLE = """
    Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization
    BlackmanWindow Cast CastLike Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos
    Cosh CumSum DeformConv DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand
    EyeLike Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool
    GlobalMaxPool Greater GreaterOrEqual GridSample GroupNormalization GRU HammingWindow HannWindow
    HardSigmoid HardSwish Hardmax Identity If ImageScaler InstanceNormalization IsInf IsNaN
    LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool
    MatMul Max MaxPool Mean MeanVarianceNormalization Min Mish Mod Mul Neg NonMaxSuppression NonZero
    Not OneHot Or Pad ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike
    RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize
    ReverseSequence RNN RoiAlign Round ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape
    Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze
    Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Upsample Where Xor
"""
TENSORRT_ONNX_OPS: frozenset[str] = frozenset(_TENSORRT_ONNX_OPS_TABLE.split())
TENSORRT_MIN_OPSET = 9
# Tensor element types TensorRT has no kernels for inside a network (UINT8 only as network I/O).
_IO_ONLY_TYPES: dict[int, str] = {TensorProto.UINT8: "UINT8"}
_UNSUPPORTED_TYPES: dict[int, str] = {
    TensorProto.DOUBLE: "DOUBLE",
    TensorProto.STRING: "STRING",
    TensorProto.COMPLEX64: "COMPLEX64",
}


def _constants(model: ModelProto) -> dict[str, np.ndarray]:
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _constraint_problems(model: ModelProto) -> list[str]:
    """TensorRT's restrictions on ops this project's graphs use (TopK, NonMaxSuppression, reductions)."""
    constants = _constants(model)
    problems = []
    for node in model.graph.node:
        where = f"{node.op_type} node {node.name!r}"
        if node.op_type == "TopK":
            k = constants.get(node.input[1]) if len(node.input) > 1 else None
            if k is None:
                problems.append(f"{where}: K must be a build-time constant")
            elif int(np.asarray(k).reshape(-1)[0]) > TENSORRT_MAX_TOPK:
                problems.append(f"{where}: K = {int(np.asarray(k).reshape(-1)[0])} must be < 3840")
            if any(a.name == "sorted" and a.i == 0 for a in node.attribute):
                problems.append(f"{where}: sorted must be 1")
        elif node.op_type == "NonMaxSuppression":
            for index, what in (
                (2, "max_output_boxes_per_class"),
                (3, "iou_threshold"),
                (4, "score_threshold"),
            ):
                if len(node.input) > index and node.input[index] and node.input[index] not in constants:
                    problems.append(f"{where}: {what} must be a constant")
        elif node.op_type.startswith("Reduce") and node.input[1:2] and node.input[1] not in ("", *constants):
            problems.append(f"{where}: axes must be a constant")
    return problems


def _type_problems(model: ModelProto) -> list[str]:
    io = {v.name for v in (*model.graph.input, *model.graph.output)}
    problems = []
    for name, elem in tensor_elem_types(model).items():
        if elem in _UNSUPPORTED_TYPES:
            problems.append(
                f"tensor {name!r} has type {_UNSUPPORTED_TYPES[elem]}, which TensorRT does not support"
            )
        elif elem in _IO_ONLY_TYPES and name not in io:
            problems.append(
                f"tensor {name!r} has type {_IO_ONLY_TYPES[elem]}, allowed only as network input/output"
            )
    return problems


def check_tensorrt_ops(model: ModelProto) -> dict[str, Any]:
    """Does TensorRT's ONNX parser accept every node of ``model``?

    Returns ``{"passed", "unsupported": {op: [node names]}, "problems": [...], "op_counts": {...}}``;
    problems cover custom domains, the opset, TopK / NonMaxSuppression constraints and tensor types.
    """
    unsupported: dict[str, list[str]] = {}
    problems = []
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            unsupported.setdefault(f"{node.domain}::{node.op_type}", []).append(node.name)
        elif node.op_type not in TENSORRT_ONNX_OPS:
            unsupported.setdefault(node.op_type, []).append(node.name)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < TENSORRT_MIN_OPSET:
        problems.append(f"opset {opset} is below TensorRT's minimum {TENSORRT_MIN_OPSET}")
    problems += _constraint_problems(model)
    problems += _type_problems(model)
    return {
        "passed": not unsupported and not problems,
        "unsupported": unsupported,
        "problems": problems,
        "op_counts": op_counts(model),
        "checked_against": "TensorRT 10.x ONNX parser operator list",
    }


def describe_op_check(report: dict[str, Any]) -> str:
    parts = [f"{op} ({len(nodes)} nodes, e.g. {nodes[0]!r})" for op, nodes in report["unsupported"].items()]
    return "; ".join([*(f"unsupported op {p}" for p in parts), *report["problems"]])

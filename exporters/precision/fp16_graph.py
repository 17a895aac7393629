"""FP16 graphs for strongly typed TensorRT (their accuracy against FP32: `exporters.precision.fp16`).

TensorRT >= 10.12 deprecates (11 removes) weak typing: the precision has to be in the ONNX graph. The
conversion here (ONNX Runtime's ``onnxruntime.transformers.float16``) keeps the graph's inputs and outputs
in their original types (uint8 images in; float32 / int32 detections out) and keeps these parts in FP32:

- the input preprocessing (cast, normalization, transpose: everything before the first Conv), so
  the mean/std arithmetic is not rounded before the network sees it;
- everything downstream of the raw head outputs: box decoding (exp of the size codes), softmax,
  score comparisons, TopK, NonMaxSuppression and the final gather/scatter, where FP16 rounding would
  flip threshold decisions and box coordinates;
- the library's default block list plus the numerically sensitive op types below, wherever they appear.

So only the network body (convolutions, BN folded into them, ReLU, pooling) runs in FP16.

Why the library converts only the network sub-graph, cut out and put back here (split, publish, topological
order), rather than the whole graph in one call with the FP32 nodes blocked: measured on the shipped
artifacts with onnxruntime 1.31.1 (``python scripts/compare_fp16_converters.py``, docs/quantization.md,
"FP16: which converter"), ``convert_float_to_float16(model, keep_io_types=True, op_block_list=...,
node_block_list=<preprocessing and post-processing nodes>)`` returns a graph that neither the ONNX checker
("Nodes in a graph must be topologically sorted": '/preprocess/Cast_output_0_cast_to_fp32') nor ONNX Runtime
("two nodes with same node name": '/decoder/Transpose_output_0_cast_to_fp32_node' for SSD300,
'raw_class_p3_cast_to_fp32_node' for EfficientDet-D0) accepts: it inserts one cast per consumer under one
name. Blocking op types only (no split) fails the checker the same way on both, and ONNX Runtime on
EfficientDet-D0. onnxconverter-common 1.16, the library's origin, failed on the whole graph too ("The
downstream node of the second cast node should be graph output"). On the sub-graph the two libraries give
the same accuracy (SSD300 AP 0.45451 -> 0.45452, EfficientDet-D0 0.74464 -> 0.74436 with either);
``tests/exporters/precision/test_fp16.py`` fails once a release converts the whole graph validly, so this
module can shrink to one call.
"""

from __future__ import annotations

from typing import Any

from onnx import ModelProto, NodeProto, TensorProto, helper, shape_inference
from onnxruntime.transformers import float16

from exporters.errors import InvalidModelError
from exporters.onnx.graph import (
    check,
    downstream_nodes,
    ensure_node_names,
    extract,
    restore_weights_fp32,
    tensor_elem_types,
)

# Op types that stay FP32 wherever they occur (in addition to the library's defaults).
SENSITIVE_OP_TYPES: tuple[str, ...] = (
    "NonMaxSuppression",
    "TopK",
    "Softmax",
    "LogSoftmax",
    "Exp",
    "Log",
    "Sigmoid",
    "ScatterND",
    "ScatterElements",
    "GatherElements",
    "GatherND",
    "RoiAlign",
    "ReduceSum",
)


def split_nodes(
    model: ModelProto, input_name: str, raw_outputs: list[str], scopes: tuple[str, ...] = ()
) -> tuple[list[int], list[int], list[int]]:
    """Indices of the (preprocess, network, postprocess) nodes, each in graph order.

    Preprocess: nodes fed by the input before the first Conv. Network: the remaining ancestors of the
    raw head outputs, plus the nodes whose names start with one of ``scopes`` (module scopes of network
    layers that run after the raw outputs: a two-stage detector's RoI heads). Postprocess: everything
    else (box decoding, scores, NMS, padding).
    """
    pre_names = set(downstream_nodes(model, [input_name], stop_op_types=frozenset({"Conv"})))
    producer = {out: i for i, node in enumerate(model.graph.node) for out in node.output}
    ancestors: set[int] = set()
    stack = [producer[name] for name in raw_outputs if name in producer]
    while stack:
        i = stack.pop()
        if i in ancestors:
            continue
        ancestors.add(i)
        stack.extend(producer[t] for t in model.graph.node[i].input if t in producer)
    pre, net, post = [], [], []
    for i, node in enumerate(model.graph.node):
        if node.name in pre_names:
            pre.append(i)
        elif i in ancestors or node.name.startswith(scopes):
            net.append(i)
        else:
            post.append(i)
    return pre, net, post


def convert_to_fp16(
    model: ModelProto, input_name: str, raw_outputs: list[str], scopes: tuple[str, ...] = ()
) -> ModelProto:
    """The FP16 graph (see the module docstring); checked with the ONNX checker.

    ``scopes``: node-name prefixes of network layers after the raw outputs that run in FP16 too
    (:func:`split_nodes`; the manifest records them as ``export_settings["fp16_scopes"]``).

    Only the network sub-graph goes through ``onnxruntime.transformers.float16`` (``keep_io_types``, so
    its boundary stays FP32, and the sensitive op types blocked); it is then put back between the FP32
    preprocessing and post-processing. Converting the whole graph with a node block list instead gives a
    graph with duplicate cast names out of topological order (the module docstring has the measurement).

    Raises:
        InvalidModelError: the converted graph fails the checker.
    """
    # An artifact exported with float16 weight storage: its weights go back to float32 first (they are
    # already rounded to float16, so the conversion below stores the same values).
    source = restore_weights_fp32(model)
    ensure_node_names(source)
    pre, post, sub_inputs, sub_outputs = _network_subgraph(source, input_name, raw_outputs, scopes)
    nodes = source.graph.node
    graph_inputs = {i.name for i in source.graph.input}
    missing = [
        t for t in sub_inputs if t not in graph_inputs and not any(t in nodes[i].output for i in pre + post)
    ]
    if missing:
        raise InvalidModelError(f"cannot isolate the network sub-graph: inputs {missing} have no producer")
    sub16 = _network_to_fp16(extract(source, sub_inputs, sub_outputs))
    converted = ModelProto()
    converted.CopyFrom(source)
    graph = converted.graph
    del graph.node[:]
    available = {i.name for i in source.graph.input} | {init.name for init in source.graph.initializer}
    available |= {init.name for init in sub16.graph.initializer}
    # With scopes, network layers also sit between post-processing nodes: restore a topological order.
    graph.node.extend(
        topological_order([*(nodes[i] for i in pre), *sub16.graph.node, *(nodes[i] for i in post)], available)
    )
    still_used = {t for n in graph.node for t in n.input}
    keep_inits = [init for init in source.graph.initializer if init.name in still_used]
    del graph.initializer[:]
    graph.initializer.extend(keep_inits)
    graph.initializer.extend(sub16.graph.initializer)
    del graph.value_info[:]  # stale types of the network's tensors; shape inference recomputes them
    converted = shape_inference.infer_shapes(converted)
    check(converted, "the FP16 graph")
    return converted


def _network_subgraph(
    source: ModelProto, input_name: str, raw_outputs: list[str], scopes: tuple[str, ...]
) -> tuple[list[int], list[int], list[str], list[str]]:
    """:func:`split_nodes` plus the network sub-graph's inputs and outputs; may insert publishing
    Identity nodes into ``source`` (see below)."""
    nodes = source.graph.node
    pre, net, post = split_nodes(source, input_name, raw_outputs, scopes)
    initializers = {init.name for init in source.graph.initializer}
    sub_inputs = _subgraph_inputs(nodes, net, initializers)
    # Its outputs: the raw heads plus any network tensor something outside the network reads.
    net_set = set(net)
    produced_by_net = {out for i in net for out in nodes[i].output}
    outside_reads = {t for i, n in enumerate(nodes) if i not in net_set for t in n.input}
    graph_outputs = {o.name for o in source.graph.output}
    sub_outputs = [
        *raw_outputs,
        *sorted((produced_by_net & (outside_reads | graph_outputs)) - set(raw_outputs)),
    ]
    # keep_io_types casts each sub-graph output back to FP32 under its own name, so a network node that
    # also reads it (Mask R-CNN's RPN head reads the FPN outputs) would get FP32 next to FP16 weights:
    # the network keeps an inner copy, and an Identity publishes it under the output's name.
    net_reads = {t for i in net for t in nodes[i].input}
    twins = [t for t in sub_outputs if t in net_reads]
    if twins:
        _publish(source, [nodes[i].name for i in net], twins)
        nodes = source.graph.node
        pre, net, post = split_nodes(source, input_name, raw_outputs, scopes)
        publishers = {f"{t}/fp16_publish" for t in twins}
        net = sorted({*net, *(i for i in post if nodes[i].name in publishers)})
        post = [i for i in post if nodes[i].name not in publishers]
        sub_inputs = _subgraph_inputs(nodes, net, initializers)
    return pre, post, sub_inputs, sub_outputs


def _subgraph_inputs(nodes: Any, net: list[int], initializers: set[str]) -> list[str]:
    """Tensors the network nodes read that are neither their own outputs nor initializers."""
    produced_by_net = {out for i in net for out in nodes[i].output}
    return sorted(
        {t for i in net for t in nodes[i].input if t and t not in produced_by_net and t not in initializers}
    )


def _network_to_fp16(sub: ModelProto) -> ModelProto:
    """``onnxruntime.transformers.float16`` on the network sub-graph (FP32 boundary, sensitive ops blocked);
    its initializers and nodes renamed ``fp16/...``, so they cannot collide with the FP32 graph's.

    Weights beyond FP16's range are clamped (tiny ones to 5.96e-8, the smallest subnormal), which is the
    intended behaviour of the conversion."""
    sub16 = float16.convert_float_to_float16(
        sub, keep_io_types=True, op_block_list=[*float16.DEFAULT_OP_BLOCK_LIST, *SENSITIVE_OP_TYPES]
    )
    if not isinstance(sub16, ModelProto):
        raise InvalidModelError(f"float16 conversion returned {type(sub16).__name__}")
    renamed = {init.name: f"fp16/{init.name}" for init in sub16.graph.initializer}
    for init in sub16.graph.initializer:
        init.name = renamed[init.name]
    for node in sub16.graph.node:
        node.name = f"fp16/{node.name}"
        for j, name in enumerate(node.input):
            if name in renamed:
                node.input[j] = renamed[name]
    return sub16


def _publish(model: ModelProto, network_nodes: list[str], names: list[str]) -> None:
    """Rename each tensor in ``names`` to ``<name>/fp16_inner`` for the ``network_nodes`` that produce or
    read it, and insert ``Identity(<name>/fp16_inner) -> <name>`` right after its producer (in place)."""
    nodes = model.graph.node
    members = set(network_nodes)
    for name in names:
        inner = f"{name}/fp16_inner"
        producer = None
        for index, node in enumerate(nodes):
            if node.name not in members:
                continue
            for j, tensor in enumerate(node.input):
                if tensor == name:
                    node.input[j] = inner
            for j, tensor in enumerate(node.output):
                if tensor == name:
                    node.output[j] = inner
                    producer = index
        if producer is None:
            raise InvalidModelError(f"no network node produces {name!r}")
        nodes.insert(producer + 1, helper.make_node("Identity", [inner], [name], name=f"{name}/fp16_publish"))


def topological_order(nodes: list[NodeProto], available: set[str]) -> list[NodeProto]:
    """``nodes`` reordered so every node follows the producers of its inputs (stable otherwise).

    ``available``: tensors present before any node runs (graph inputs, initializers). Raises
    InvalidModelError if some node's input is never produced (a cycle or a missing producer).
    """
    ready = set(available) | {""}
    pending = list(nodes)
    ordered: list[NodeProto] = []
    while pending:
        still: list[NodeProto] = []
        for node in pending:
            if all(name in ready for name in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                still.append(node)
        if len(still) == len(pending):
            missing = sorted({n for node in still for n in node.input if n not in ready})[:5]
            raise InvalidModelError(f"cannot order the FP16 graph: inputs {missing} are never produced")
        pending = still
    return ordered


def fp16_fraction(model: ModelProto) -> dict[str, Any]:
    """How much of the graph is FP16: Conv nodes with FP16 weights, and FP16 initializer bytes."""
    types = tensor_elem_types(model)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    conv_fp16 = sum(types.get(n.input[1]) == TensorProto.FLOAT16 for n in convs)
    fp16_bytes = sum(len(i.raw_data) for i in model.graph.initializer if i.data_type == TensorProto.FLOAT16)
    all_bytes = sum(len(i.raw_data) for i in model.graph.initializer) or 1
    return {
        "conv_fp16": int(conv_fp16),
        "conv_total": len(convs),
        "fp16_weight_bytes_fraction": fp16_bytes / all_bytes,
    }

"""Rewrites of an exported detection graph that keep its outputs and make it cheaper to run.

Each function takes an ``onnx.ModelProto`` of this project's export layout (``exporters.onnx.export``) and
returns a rewritten copy; new exports already have the rewritten form, so these exist for artifacts
exported before. ``scripts/rewrite_artifact_graph.py`` applies one to an artifact in place and accepts
the result only if every output is bit-for-bit equal on real images, on ONNX Runtime and on OpenVINO.

- :func:`mask_scores_before_topk`: the global pre-NMS TopK (EfficientDet) sees scores at or below the
  score threshold as -1, so OpenVINO's TopK over mostly equal values runs ~10x faster.
- :func:`decode_candidates_only`: box decoding (per anchor, elementwise) runs on the TopK's candidates
  only (EfficientDet-D0 at 256: 3,000 of 12,276 anchors) instead of every anchor.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

TOPK_NODE = "/postprocess/TopK"  # the global pre-NMS TopK (pre_nms_topk), as the exporter names it
MASKED = "/postprocess/MaskBeforeTopK"
GATHERED_CODES = "decode_candidates_codes"

# What box decoding may consist of for decode_candidates_only: ops that act per anchor (elementwise, or
# along the last, coordinate axis of [B, A, n]), so the same ops on gathered rows give the gathered rows.
_ELEMENTWISE = frozenset({"Mul", "Add", "Sub", "Div", "Exp", "Clip"})
_LAST_AXIS = frozenset({2, -1})


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def mask_scores_before_topk(model: onnx.ModelProto, score_threshold: float) -> onnx.ModelProto:
    """A copy of ``model`` with Greater + Where in front of its global pre-NMS TopK's scores."""
    model = copy_model(model)
    graph = model.graph
    topk = _node(graph, TOPK_NODE, "not a global pre-NMS top-k export")
    axis = next((helper.get_attribute_value(a) for a in topk.attribute if a.name == "axis"), -1)
    if axis != 1:  # the global one runs over [B, C*A]; the per-class one over [B, C, A] (axis 2)
        raise ValueError(f"{TOPK_NODE} runs over axis {axis}, not 1: not a global pre-NMS top-k export")
    scores = topk.input[0]
    producer = next((node for node in graph.node if scores in node.output), None)
    if producer is not None and producer.op_type == "Where":
        raise ValueError("already rewritten: scores are masked before the TopK")
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(score_threshold, np.float32), "mask_before_topk_threshold"),
            numpy_helper.from_array(np.array(-1.0, np.float32), "mask_before_topk_fill"),
        ]
    )
    at = list(graph.node).index(topk)
    above = helper.make_node(
        "Greater",
        [scores, "mask_before_topk_threshold"],
        ["mask_before_topk_above"],
        name="/postprocess/Above",
    )
    masked = helper.make_node(
        "Where",
        ["mask_before_topk_above", scores, "mask_before_topk_fill"],
        ["mask_before_topk_scores"],
        name=MASKED,
    )
    graph.node.insert(at, masked)
    graph.node.insert(at, above)
    topk.input[0] = "mask_before_topk_scores"
    onnx.checker.check_model(model)
    return model


def decode_candidates_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose box decoding runs after the pre-NMS gather, on the candidates' codes.

    Before: codes ``[B, A, 4]`` -> decoding (anchor constants ``[1, A, n]``) -> boxes ``[B, A, 4]`` ->
    GatherElements (the candidates' anchors) -> ``[B, k, 4]``. After: codes -> GatherElements (same
    indices) -> decoding, each anchor constant gathered at the candidates' anchors -> ``[B, k, 4]``.
    """
    model = copy_model(model)
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    constants = _constants(graph)
    boxes_gather = next(
        (
            node
            for node in graph.node
            if node.op_type == "GatherElements"
            and node.name.startswith("/postprocess/")
            and not producers.get(node.input[0], node).name.startswith("/postprocess/")
        ),
        None,
    )
    if boxes_gather is None:
        raise ValueError("no GatherElements of the decoder's boxes in /postprocess/")
    decoding, starts = _decoding(producers, constants, boxes_gather.input[0])
    if not decoding:
        raise ValueError(
            "no per-anchor box decoding in front of the candidates' gather (already rewritten, or none)"
        )
    if len(starts) != 1:
        raise ValueError(f"box decoding starts from {len(starts)} tensors, not one tensor of codes")
    (codes,) = starts

    index = boxes_gather.input[1]  # [B, k, 4]: each candidate's anchor, repeated per coordinate
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([0], np.int64), "decode_candidates_zero"),
            numpy_helper.from_array(np.array([1], np.int64), "decode_candidates_one"),
            numpy_helper.from_array(np.array([2], np.int64), "decode_candidates_axis"),
        ]
    )
    new_nodes = [
        helper.make_node(
            "GatherElements", [codes, index], [GATHERED_CODES], axis=1, name="/postprocess/GatherCodes"
        ),
        helper.make_node(
            "Slice",
            [index, "decode_candidates_zero", "decode_candidates_one", "decode_candidates_axis"],
            ["decode_candidates_anchor_col"],
            name="/postprocess/CandidateAnchorsColumn",
        ),
        helper.make_node(
            "Squeeze",
            ["decode_candidates_anchor_col", "decode_candidates_axis"],
            ["decode_candidates_anchors"],
            name="/postprocess/CandidateAnchors",
        ),
    ]
    for node in decoding:
        for i, name in enumerate(node.input):
            if name == codes:
                node.input[i] = GATHERED_CODES
            elif _per_anchor(constants.get(name)):
                per_anchor = f"decode_candidates_{len(new_nodes)}"
                graph.initializer.append(numpy_helper.from_array(constants[name][0], per_anchor + "_table"))
                new_nodes.append(
                    helper.make_node(
                        "Gather",
                        [per_anchor + "_table", "decode_candidates_anchors"],
                        [per_anchor],
                        axis=0,
                        name=f"/postprocess/CandidateAnchorConstant{len(new_nodes)}",
                    )
                )
                node.input[i] = per_anchor
    decoded = boxes_gather.output[0]
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == decoded:
                node.input[i] = boxes_gather.input[0]
    moved = {name for node in decoding for name in node.output}  # their recorded shapes were per anchor
    stale = [info for info in graph.value_info if info.name in moved]
    for info in stale:
        graph.value_info.remove(info)
    kept = [node for node in graph.node if node is not boxes_gather] + new_nodes
    del graph.node[:]
    graph.node.extend(_topological(kept, graph))
    _drop_unused_constants(graph)  # the per-anchor tables replaced by their gathered copies
    try:  # shape inference too: an anchor constant the rewrite misread shows as a broadcast error
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        raise ValueError(f"the rewritten graph is not valid: {error}") from None
    return model


def _drop_unused_constants(graph: onnx.GraphProto) -> None:
    """Remove initializers and Constant nodes nothing reads any more (runtimes warn about them)."""
    used = {name for node in graph.node for name in node.input} | {out.name for out in graph.output}
    for init in [init for init in graph.initializer if init.name not in used]:
        graph.initializer.remove(init)
    for node in [n for n in graph.node if n.op_type == "Constant" and n.output[0] not in used]:
        graph.node.remove(node)


def _node(graph: onnx.GraphProto, name: str, missing: str) -> onnx.NodeProto:
    for node in graph.node:
        if node.name == name:
            node_proto: onnx.NodeProto = node
            return node_proto
    raise ValueError(f"no {name} node: {missing}")


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _per_anchor(value: np.ndarray | None) -> bool:
    """A ``[1, A, n]`` constant that an elementwise op broadcasts against ``[B, A, n]``: one row per anchor
    (a dim of 1 would broadcast instead)."""
    return value is not None and value.ndim == 3 and value.shape[0] == 1 and value.shape[1] > 1


def _decoding(
    producers: dict[str, onnx.NodeProto], constants: dict[str, np.ndarray], boxes: str
) -> tuple[list[onnx.NodeProto], set[str]]:
    """The per-anchor nodes computing ``boxes``, upstream until a node that is not per anchor, and the
    tensors they start from (constants aside)."""
    found: dict[int, onnx.NodeProto] = {}
    starts: set[str] = set()
    frontier = [boxes]
    while frontier:
        name = frontier.pop()
        node = producers.get(name)
        if name in constants or (node is not None and id(node) in found):
            continue
        if node is None or not _is_per_anchor(node, constants):
            starts.add(name)
            continue
        found[id(node)] = node
        frontier.extend(node.input)
    return list(found.values()), starts


def _is_per_anchor(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
    """Elementwise, or along the last axis of ``[B, A, n]`` (rank 3: axis 2 or -1) only."""
    if node.op_type in _ELEMENTWISE:
        return True
    if node.op_type in ("Gather", "Concat", "Split"):
        axis = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
        return axis in _LAST_AXIS
    if node.op_type in ("Slice", "Squeeze", "Unsqueeze"):
        axes_input = 3 if node.op_type == "Slice" else 1
        if len(node.input) <= axes_input or node.input[axes_input] not in constants:
            return False
        return all(int(axis) in _LAST_AXIS for axis in constants[node.input[axes_input]].reshape(-1))
    return False


def _topological(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """``nodes`` ordered so that every node comes after the producers of its inputs (ONNX requires it)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(nodes), []
    while pending:
        ready = [node for node in pending if all(name in available for name in node.input)]
        if not ready:
            raise ValueError("the rewritten graph has a cycle or a missing input")
        for node in ready:
            available.update(node.output)
        ordered.extend(ready)
        ready_ids = {id(node) for node in ready}
        pending = [node for node in pending if id(node) not in ready_ids]
    return ordered

"""Rewrites of an exported detection graph that keep its outputs and make it cheaper to run.

Each function takes an ``onnx.ModelProto`` of this project's export layout (``exporters.onnx.export``) and
returns a rewritten copy; new exports already have the rewritten form, so these exist for artifacts
exported before. ``scripts/export/rewrite_artifact_graph.py`` applies one to an artifact in place and accepts
the result only if every output is bit-for-bit equal on real images, on ONNX Runtime and on OpenVINO.

- :func:`mask_scores_before_topk`: the global pre-NMS TopK (EfficientDet) sees scores at or below the
  score threshold as -1, so OpenVINO's TopK over mostly equal values runs ~10x faster.
- :func:`decode_candidates_only`: box decoding (per anchor, elementwise) runs on the TopK's candidates
  only (EfficientDet-D0 at 256: 3,000 of 12,276 anchors) instead of every anchor.
- :func:`sigmoid_after_topk`: the masked global TopK runs over the class logits, and the sigmoid over
  its candidates only (EfficientDet-D0 at 256: 3,000 of 73,656 scores).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from exporters.onnx.postprocess_graph import logit

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


def sigmoid_after_topk(model: onnx.ModelProto, score_threshold: float) -> onnx.ModelProto:
    """A copy of ``model`` (scores masked before its global TopK) whose TopK reads the logits.

    Before: logits -> Sigmoid -> layout ops -> Where(score > t, score, -1) -> TopK -> scores ``[B, k]``.
    After: logits -> layout ops -> Where(x > logit(t), x, float32 min) -> TopK -> Where(x > logit(t),
    Sigmoid(x), -1). The sigmoid is monotonic, so the TopK picks the same candidates in the same order,
    except among logits whose sigmoids round to one float32 (``scripts/export/rewrite_artifact_graph.py``
    checks the outputs on real images).
    """
    model = copy_model(model)
    graph = model.graph
    topk = _node(graph, TOPK_NODE, "not a global pre-NMS top-k export")
    producers = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    masked = producers.get(topk.input[0])  # Where(Greater(scores, threshold), scores, fill)
    above = producers.get(masked.input[0]) if masked is not None and masked.op_type == "Where" else None
    if masked is None or above is None or above.op_type != "Greater" or above.input[0] != masked.input[1]:
        raise ValueError("the TopK's scores are not masked at the threshold: mask_scores_before_topk first")
    layout, node = [], producers.get(masked.input[1])
    while node is not None and node.op_type in ("Transpose", "Reshape"):
        layout.append(node)
        node = producers.get(node.input[0])
    if node is None or node.op_type != "Sigmoid":
        raise ValueError("no Sigmoid in front of the masked scores (already rewritten, or none)")
    sigmoid = node
    # Only the mask may read the scores (a Shape may: it reads no values); anything else would get logits.
    chain = [sigmoid, *reversed(layout)]  # upstream to downstream
    mask_readers = [[n.name] for n in chain[1:]] + [sorted([above.name, masked.name])]
    for node, allowed in zip(chain, mask_readers, strict=True):
        value_readers = [r.name for r in readers.get(node.output[0], []) if r.op_type != "Shape"]
        if sorted(value_readers) != allowed:
            raise ValueError(
                f"{node.output[0]} is read by more than the TopK's mask; the sigmoid cannot move"
            )
    threshold = float(_constants(graph)[above.input[1]])
    if not math.isclose(threshold, score_threshold, rel_tol=1e-6):
        raise ValueError(f"the mask's threshold is {threshold}, not the score threshold {score_threshold}")
    for node in readers[sigmoid.output[0]]:
        node.input[:] = [sigmoid.input[0] if name == sigmoid.output[0] else name for name in node.input]
    graph.node.remove(sigmoid)
    graph.initializer.extend(
        [
            numpy_helper.from_array(
                np.array(logit(score_threshold), np.float32), "sigmoid_after_topk_threshold"
            ),
            numpy_helper.from_array(
                np.array(np.finfo(np.float32).min, np.float32), "sigmoid_after_topk_fill"
            ),
            numpy_helper.from_array(np.array(-1.0, np.float32), "sigmoid_after_topk_dropped"),
        ]
    )
    above.input[1] = "sigmoid_after_topk_threshold"
    masked.input[2] = "sigmoid_after_topk_fill"
    values = topk.output[0]
    for node in readers.get(values, []):
        node.input[:] = ["sigmoid_after_topk_scores" if name == values else name for name in node.input]
    at = list(graph.node).index(topk) + 1
    for offset, node in enumerate(_scores_from_logits(values, "sigmoid_after_topk_scores")):
        graph.node.insert(at + offset, node)
    _drop_unused_constants(graph)  # the mask's former threshold and fill
    onnx.checker.check_model(model, full_check=True)
    return model


def _scores_from_logits(logits: str, scores: str) -> list[onnx.NodeProto]:
    """Nodes computing ``scores`` = sigmoid(``logits``) where above the threshold's logit, else -1."""
    return [
        helper.make_node(
            "Sigmoid", [logits], ["sigmoid_after_topk_sigmoid"], name="/postprocess/SigmoidAfterTopK"
        ),
        helper.make_node(
            "Greater",
            [logits, "sigmoid_after_topk_threshold"],
            ["sigmoid_after_topk_kept"],
            name="/postprocess/KeptAfterTopK",
        ),
        helper.make_node(
            "Where",
            ["sigmoid_after_topk_kept", "sigmoid_after_topk_sigmoid", "sigmoid_after_topk_dropped"],
            [scores],
            name="/postprocess/ScoresAfterTopK",
        ),
    ]


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
    boxes_gather = _boxes_gather(graph, producers)
    decoding, starts = _decoding(producers, constants, boxes_gather.input[0])
    if not decoding:
        raise ValueError(
            "no per-anchor box decoding in front of the candidates' gather (already rewritten, or none)"
        )
    if len(starts) != 1:
        raise ValueError(f"box decoding starts from {len(starts)} tensors, not one tensor of codes")
    (codes,) = starts

    new_nodes = _decode_gathered(graph, decoding, codes, constants, boxes_gather.input[1])
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


def _boxes_gather(graph: onnx.GraphProto, producers: dict[str, onnx.NodeProto]) -> onnx.NodeProto:
    """The post-processing's GatherElements of the decoder's boxes (its input made outside /postprocess/)."""
    boxes_gather: onnx.NodeProto | None = next(
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
    return boxes_gather


def _decode_gathered(
    graph: onnx.GraphProto,
    decoding: list[onnx.NodeProto],
    codes: str,
    constants: dict[str, np.ndarray],
    index: str,
) -> list[onnx.NodeProto]:
    """Rewire ``decoding`` onto the candidates: the codes gathered at ``index`` (``[B, k, 4]``: each
    candidate's anchor, repeated per coordinate) and each per-anchor constant gathered at the candidates'
    anchors. Returns the new nodes (their initializers are added to ``graph``)."""
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
    return new_nodes


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

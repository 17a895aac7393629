"""Small, tested operations on ONNX graphs: load-and-check, exposing intermediate tensors, sub-graphs.

Exported artifacts keep their raw head outputs as named intermediate tensors (``raw_locs``,
``raw_confs`` for SSD300; listed in the manifest under ``provenance.export_settings.raw_outputs``), so
verification and FP16 checks can read them from the artifact itself rather than from a second export.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection
from pathlib import Path

import numpy as np
import onnx
from onnx import ModelProto, helper, shape_inference

from exporters.errors import InvalidModelError


def load_checked(path: str | Path) -> ModelProto:
    """Load an ONNX file and run the full checker (with shape inference).

    Raises:
        InvalidModelError: missing, unreadable or invalid file (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidModelError(f"ONNX file {path} does not exist")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # protobuf DecodeError, ValidationError, InferenceError ...
        raise InvalidModelError(f"{path} is not a valid ONNX model: {type(exc).__name__}: {exc}") from exc
    return model


def check(model: ModelProto, what: str) -> None:
    """Full checker with strict shape inference on an in-memory model; raises InvalidModelError."""
    try:
        onnx.checker.check_model(model, full_check=True)
        shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as exc:
        raise InvalidModelError(f"{what} fails the ONNX checker: {type(exc).__name__}: {exc}") from exc


def op_counts(model: ModelProto) -> dict[str, int]:
    """Node count per op type, sorted by name (main graph)."""
    return dict(sorted(Counter(node.op_type for node in model.graph.node).items()))


def tensor_elem_types(model: ModelProto) -> dict[str, int]:
    """Element type of every tensor shape inference can type (inputs, outputs, intermediates)."""
    inferred = shape_inference.infer_shapes(model)
    types: dict[str, int] = {}
    for info in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if info.type.HasField("tensor_type"):
            types[info.name] = info.type.tensor_type.elem_type
    for init in inferred.graph.initializer:
        types[init.name] = init.data_type
    return types


def with_outputs(model: ModelProto, names: list[str]) -> ModelProto:
    """A copy of ``model`` that also outputs the intermediate tensors ``names`` (types from inference)."""
    types = tensor_elem_types(model)
    produced = {out for node in model.graph.node for out in node.output}
    missing = [n for n in names if n not in produced]
    if missing:
        raise InvalidModelError(f"graph has no tensors {missing} to expose")
    copy = ModelProto()
    copy.CopyFrom(model)
    existing = {o.name for o in copy.graph.output}
    for name in names:
        if name not in existing:
            copy.graph.output.append(helper.make_tensor_value_info(name, types.get(name, 0), None))
    return copy


def without_outputs(model: ModelProto, names: list[str]) -> ModelProto:
    """A copy of ``model`` whose graph no longer lists ``names`` as outputs (the tensors stay inside).

    Their types and shapes move to ``value_info``, so tools that read it (``extract``) still know them.
    """
    copy = ModelProto()
    copy.CopyFrom(model)
    keep = [o for o in copy.graph.output if o.name not in names]
    known = {v.name for v in copy.graph.value_info}
    moved = [o for o in copy.graph.output if o.name in names and o.name not in known]
    del copy.graph.output[:]
    copy.graph.output.extend(keep)
    copy.graph.value_info.extend(moved)
    return copy


def extract(model: ModelProto, inputs: list[str], outputs: list[str]) -> ModelProto:
    """The sub-graph computing ``outputs`` from ``inputs`` (onnx.utils.Extractor, no file round trip)."""
    return onnx.utils.Extractor(model).extract_model(inputs, outputs)


def downstream_nodes(
    model: ModelProto, tensors: list[str], stop_op_types: frozenset[str] = frozenset()
) -> list[str]:
    """Names of the nodes that consume ``tensors`` directly or transitively, not walking past (nor
    including) nodes of ``stop_op_types``."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    seen: set[str] = set()
    order: list[str] = []
    queue = deque(tensors)
    while queue:
        for node in consumers.get(queue.popleft(), []):
            if node.op_type in stop_op_types or node.name in seen:
                continue
            seen.add(node.name)
            order.append(node.name)
            queue.extend(node.output)
    return order


def ensure_node_names(model: ModelProto) -> None:
    """Give every node a unique name, in place (graph splits and TensorRT errors refer to nodes by name)."""
    seen: set[str] = set()
    for index, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
        seen.add(node.name)


def store_weights_fp16(model: ModelProto, min_elements: int = 1024, keep: Collection[str] = ()) -> ModelProto:
    """Store large float32 weights as float16 and cast them back to float32 at the start of the graph.

    Halves the file; compute stays float32 (ONNX Runtime folds the constant ``Cast`` nodes once, when the
    session is created). The only change is that each weight is rounded to float16 (relative error
    <= 2**-11). Initializers smaller than ``min_elements`` (biases, BatchNorm-folded vectors, constants
    the post-processing uses) and those named in ``keep`` stay float32.
    """
    from onnx import TensorProto, numpy_helper

    stored = onnx.ModelProto()
    stored.CopyFrom(model)
    graph = stored.graph
    casts = []
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or int(np.prod(init.dims)) < min_elements or init.name in keep:
            continue
        name = init.name
        half = numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), name=f"{name}__fp16")
        init.CopyFrom(half)
        casts.append(
            helper.make_node("Cast", [half.name], [name], to=TensorProto.FLOAT, name=f"{name}__cast")
        )
    for node in reversed(casts):  # consumers follow: keep the graph topologically sorted
        graph.node.insert(0, node)
    return stored


def restore_weights_fp32(model: ModelProto) -> ModelProto:
    """Undo :func:`store_weights_fp16`: each float16 weight that a ``Cast`` to float32 reads becomes a
    float32 initializer under the cast's output name, and the cast goes (exact: every float16 value is a
    float32 value). Graphs without such casts come back unchanged (as a copy)."""
    from onnx import TensorProto, numpy_helper

    restored = onnx.ModelProto()
    restored.CopyFrom(model)
    graph = restored.graph
    inits = {init.name: init for init in graph.initializer}
    folded: list[int] = []
    for index, node in enumerate(graph.node):
        source = inits.get(node.input[0]) if node.op_type == "Cast" and node.input else None
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if source is None or source.data_type != TensorProto.FLOAT16 or to != TensorProto.FLOAT:
            continue
        graph.initializer.append(
            numpy_helper.from_array(numpy_helper.to_array(source).astype(np.float32), name=node.output[0])
        )
        folded.append(index)
    for index in reversed(folded):
        del graph.node[index]
    still_read = {name for node in graph.node for name in node.input}
    keep = [i for i in graph.initializer if i.data_type != TensorProto.FLOAT16 or i.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return restored

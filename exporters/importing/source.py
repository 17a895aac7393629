"""The source model: its file as ONNX (TFLite converted with tflite2onnx), and its own runtime.

The reference a converted graph is checked against is the source format's runtime: Google's TFLite runtime
(``ai-edge-litert``) for ``.tflite``, ONNX Runtime for ``.onnx``. Inputs are float32 NHWC in the source's
normalization (``spec.InputNormalization``); a converted graph whose input is NCHW gets a Transpose in front
(``heads``), never a different network.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from exporters.errors import ExportError

# The opset of the post-processing graph the source is merged with.
OPSET = 17


@dataclass
class SourceModel:
    path: Path
    format: str  # "tflite" | "onnx"
    onnx_model: onnx.ModelProto
    input_name: str
    input_layout: str  # "NHWC" | "NCHW" (of the ONNX graph; TFLite runs NHWC)
    output_names: list[str]


def load_source(path: Path) -> SourceModel:
    """Read ``path`` (.tflite or .onnx) and give its graph as ONNX at ``OPSET`` with a dynamic batch."""
    if not path.is_file():
        raise ExportError(f"source model {path} does not exist")
    if path.suffix == ".tflite":
        model, fmt = _tflite_to_onnx(path), "tflite"
    elif path.suffix == ".onnx":
        try:
            model, fmt = onnx.load(str(path)), "onnx"
        except Exception as exc:  # protobuf's DecodeError, or a missing external-data file
            raise ExportError(f"source model {path} is not a readable ONNX file: {exc}") from exc
    elif path.suffix == ".json":
        raise ExportError(_tfjs_refusal(path))
    else:
        raise ExportError(f"source model {path}: unknown format {path.suffix!r} (expected .tflite or .onnx)")
    if len(_real_inputs(model)) != 1:
        raise ExportError(
            f"source model {path} has {len(_real_inputs(model))} inputs; an image detector has one"
        )
    model = _at_opset(model, path)
    graph_input = _real_inputs(model)[0]
    dims = [d.dim_value or None for d in graph_input.type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise ExportError(f"source model {path}: input {graph_input.name!r} has rank {len(dims)}; expected 4")
    layout = "NCHW" if dims[1] == 3 else "NHWC"
    _dynamic_batch(model)
    return SourceModel(path, fmt, model, graph_input.name, layout, [o.name for o in model.graph.output])


def _tfjs_refusal(path: Path) -> str:
    """What is wrong with a TF.js graph model (``model.json`` and its weight shards): a missing shard is
    named; a complete one still needs converting (tf2onnx --tfjs, which needs TensorFlow) before import."""
    try:
        manifest = json.loads(path.read_text())
        shards = [p for group in manifest["weightsManifest"] for p in group["paths"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"source model {path}: not a TF.js model.json with a weightsManifest ({exc})"
    missing = [p for p in shards if not (path.parent / p).is_file()]
    if missing:
        return f"source model {path}: TF.js weight files missing beside it: {missing}"
    return (
        f"source model {path} is a TF.js graph model: convert it to ONNX first "
        "(python -m tf2onnx.convert --tfjs model.json --output model.onnx, "
        "in an environment with tensorflow-cpu)"
    )


def _real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _tflite_to_onnx(path: Path) -> onnx.ModelProto:
    import tflite2onnx

    # It warns once per float16 tensor that float16 is "not tested"; the verification checks the result.
    logging.getLogger("tflite2onnx").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "converted.onnx"
        try:
            tflite2onnx.convert(str(path), str(out))
        except Exception as exc:  # the converter raises bare exceptions for unsupported operators
            raise ExportError(f"source model {path}: tflite2onnx cannot convert it: {exc}") from exc
        return onnx.load(str(out))


def _at_opset(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset == OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, OPSET)
    except Exception as exc:
        raise ExportError(f"source model {path}: cannot convert opset {opset} to {OPSET}: {exc}") from exc


def _dynamic_batch(model: onnx.ModelProto) -> None:
    """A batch-1 graph (as TFLite converts) -> any batch: the first dimension of the input and outputs
    becomes symbolic and each constant Reshape target that starts with 1 copies the batch instead (0).
    The verification then compares batch 3 against three batch-1 runs."""
    graph = model.graph
    for value in [*_real_inputs(model), *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_param = "batch"
    del graph.value_info[:]
    initializers = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[1] not in initializers:
            continue
        tensor = initializers[node.input[1]]
        shape = numpy_helper.to_array(tensor).copy()
        if shape.size and shape[0] == 1:
            shape[0] = 0  # Reshape: 0 copies the input's dimension
            tensor.CopyFrom(numpy_helper.from_array(shape, tensor.name))


def reference_outputs(source: SourceModel, images: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """The source runtime's outputs for float32 NHWC ``images`` [B, H, W, 3], one image per call (the
    source may take batch 1 only)."""
    run = _tflite_runner(source, names) if source.format == "tflite" else _onnx_runner(source, names)
    runs = [run(image[None]) for image in images]
    return {name: np.concatenate([r[name] for r in runs]) for name in names}


Runner = Callable[[np.ndarray], dict[str, np.ndarray]]


def _tflite_runner(source: SourceModel, names: list[str]) -> Runner:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(source.path))
    interpreter.allocate_tensors()
    input_index = interpreter.get_input_details()[0]["index"]
    by_name = {d["name"]: d["index"] for d in interpreter.get_output_details()}

    def run(image: np.ndarray) -> dict[str, np.ndarray]:
        interpreter.set_tensor(input_index, image)
        interpreter.invoke()
        return {n: interpreter.get_tensor(by_name[n]).copy() for n in names}

    return run


def _onnx_runner(source: SourceModel, names: list[str]) -> Runner:
    import onnxruntime as ort

    session = ort.InferenceSession(source.path.as_posix(), providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def run(image: np.ndarray) -> dict[str, np.ndarray]:
        feed = image.transpose(0, 3, 1, 2) if source.input_layout == "NCHW" else image
        return dict(zip(names, session.run(names, {input_name: np.ascontiguousarray(feed)}), strict=True))

    return run

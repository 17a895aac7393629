"""TensorRT's ONNX parser, checked on the graph: operators, constraints, tensor types (no GPU needed)."""

from __future__ import annotations

import onnx
from exporters_testkit import ExportedArtifact
from onnx import TensorProto, helper

from exporters.precision.fp16 import convert_to_fp16
from exporters.tensorrt.ops import check_tensorrt_ops, describe_op_check


def test_exported_graphs_use_only_tensorrt_ops(exported: ExportedArtifact) -> None:
    fp32 = onnx.load(str(exported.model_path))
    for model in (fp32, convert_to_fp16(fp32, "images", ["raw_locs", "raw_confs"])):
        report = check_tensorrt_ops(model)
        assert report["passed"], (report["unsupported"], report["problems"])
        assert {"NonMaxSuppression", "TopK", "Conv"} <= set(report["op_counts"])


def _graph(nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6000])],
        [helper.make_tensor_value_info(n.output[0], TensorProto.UNDEFINED, None) for n in nodes],
        initializers,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)]
    )


def test_unsupported_ops_and_constraints_are_reported() -> None:
    k = helper.make_tensor("k", TensorProto.INT64, [1], [5000])
    model = _graph(
        [
            helper.make_node("Unique", ["x"], ["u"], name="unique_node"),
            helper.make_node("FancyOp", ["x"], ["f"], name="custom_node", domain="my.ops"),
            helper.make_node("TopK", ["x", "k"], ["v", "i"], name="big_topk"),
        ],
        [k],
    )
    report = check_tensorrt_ops(model)
    assert not report["passed"]
    assert report["unsupported"] == {"Unique": ["unique_node"], "my.ops::FancyOp": ["custom_node"]}
    assert report["problems"] == ["TopK node 'big_topk': K = 5000 must be < 3840"]
    assert describe_op_check(report) == (
        "unsupported op Unique (1 nodes, e.g. 'unique_node'); "
        "unsupported op my.ops::FancyOp (1 nodes, e.g. 'custom_node'); "
        "TopK node 'big_topk': K = 5000 must be < 3840"
    )

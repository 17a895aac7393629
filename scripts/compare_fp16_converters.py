"""FP16 graphs of fp32 artifacts: this project's conversion against the library's in one call.

python scripts/compare_fp16_converters.py models/ssd300-synth/1 models/efficientdet-d0-synth/1 --out /tmp/fp16

For each artifact, three FP16 graphs made with ``onnxruntime.transformers.float16.convert_float_to_float16``
(``keep_io_types``, the same op block list):

- ``project``: ``exporters.precision.fp16_graph.convert_to_fp16`` (the library on the network sub-graph
  only, put back between the FP32 preprocessing and post-processing);
- ``whole-node-block-list``: the whole graph in one call, the preprocessing and post-processing nodes
  blocked by name (what would replace the project's code);
- ``whole-op-block-list``: the whole graph in one call, op types blocked only.

Prints each graph's size, its FP16 share, and whether the ONNX checker and ONNX Runtime accept it; the
graphs ONNX Runtime loads are written to ``--out`` so that ``detect-export fp16-eval --artifact A --fp16
<file> --data DATA --no-write`` measures their AP (docs/quantization.md, "FP16: which converter").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
import onnxruntime as ort
from onnxruntime.transformers import float16

from contract.manifest import Manifest
from exporters.evaluation.verify import raw_names_from_manifest
from exporters.onnx.graph import check, ensure_node_names, restore_weights_fp32
from exporters.precision.fp16_graph import SENSITIVE_OP_TYPES, convert_to_fp16, fp16_fraction, split_nodes

BLOCKED_OPS = [*float16.DEFAULT_OP_BLOCK_LIST, *SENSITIVE_OP_TYPES]


def library_whole_graph(model: onnx.ModelProto, manifest: Manifest, *, block_nodes: bool) -> onnx.ModelProto:
    source = restore_weights_fp32(model)
    ensure_node_names(source)
    blocked_nodes = None
    if block_nodes:
        pre, _, post = split_nodes(source, manifest.input.name, raw_names_from_manifest(manifest))
        blocked_nodes = [source.graph.node[i].name for i in pre + post]
    converted: onnx.ModelProto = float16.convert_float_to_float16(
        source, keep_io_types=True, op_block_list=BLOCKED_OPS, node_block_list=blocked_nodes
    )
    return converted


def describe(label: str, model: onnx.ModelProto, out: Path) -> None:
    casts = sum(node.op_type == "Cast" for node in model.graph.node)
    share = fp16_fraction(model)
    print(
        f"  {label}: {len(model.graph.node)} nodes ({casts} Cast), Conv in FP16 "
        f"{share['conv_fp16']}/{share['conv_total']}, "
        f"FP16 weight bytes {share['fp16_weight_bytes_fraction']:.4f}"
    )
    try:
        check(model, label)
        print("    ONNX checker: accepted")
    except Exception as exc:
        print(f"    ONNX checker: refused: {str(exc).splitlines()[0]}")
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        print(f"    ONNX Runtime: refused: {str(exc).splitlines()[0]}")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    print(f"    ONNX Runtime: loads; written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path, help="fp32 ONNX artifact folders")
    parser.add_argument("--out", type=Path, required=True, help="folder for the graphs ONNX Runtime loads")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    for artifact in args.artifacts:
        manifest = Manifest.read(artifact)
        model = onnx.load(str(artifact / "model.onnx"))
        name = manifest.name
        print(f"{name} ({len(model.graph.node)} nodes in FP32)")
        raw = raw_names_from_manifest(manifest)
        scopes = tuple(str(s) for s in manifest.provenance.export_settings.get("fp16_scopes", ()))
        describe(
            "project",
            convert_to_fp16(model, manifest.input.name, raw, scopes),
            args.out / f"{name}.project.onnx",
        )
        for label, block_nodes in (("whole-node-block-list", True), ("whole-op-block-list", False)):
            converted = library_whole_graph(model, manifest, block_nodes=block_nodes)
            describe(label, converted, args.out / f"{name}.{label}.onnx")


if __name__ == "__main__":
    main()

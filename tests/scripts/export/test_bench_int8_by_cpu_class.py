"""The fp32 stand-in of scripts/export/bench_int8_by_cpu_class.py for an INT8 artifact whose parent is not
here: the INT8 graph with its quantizers taken out, which computes what the parent computes up to the weights'
rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from scripts_testkit import load_script

from bench.backend.inputs import bench_images
from contract.manifest import Manifest
from service.served import load_backend

ROOT = Path(__file__).resolve().parents[3]
INT8 = ROOT / "models" / "ssd300-synth-int8" / "1"
PARENT = ROOT / "models" / "ssd300-synth" / "1"

script = load_script("export/bench_int8_by_cpu_class")


def test_the_dequantized_graph_has_no_quantizers_and_answers_as_the_parent(tmp_path: Path) -> None:
    out = script.dequantized(INT8, tmp_path / "ssd300-dequantized" / "1")
    graph = onnx.load(str(out / "model.onnx")).graph
    assert not [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert Manifest.read(out).precision == "fp32"
    images = bench_images(Manifest.read(PARENT), 2)
    standing_in = load_backend(out, "cpu", threads=2).infer(images)
    parent = load_backend(PARENT, "cpu", threads=2).infer(images)
    # the top detections agree: same classes, boxes within a few pixels of 300
    for i in range(2):
        assert standing_in["detection_classes"][i, 0] == parent["detection_classes"][i, 0]
        np.testing.assert_allclose(
            standing_in["detection_boxes"][i, 0], parent["detection_boxes"][i, 0], atol=0.02
        )

"""Giving an INT8 artifact with signed activations back NNCF's unsigned quantizers
(scripts/unsigned_int8_activations.py), on the shipped SSD300 INT8 artifact made signed again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from scripts_testkit import load_script

from contract.manifest import Manifest
from exporters.precision.nncf_int8 import to_signed_int8, to_unsigned_activations
from training.data.synthetic import generate_dataset

ROOT = Path(__file__).resolve().parents[2]
INT8 = ROOT / "models" / "ssd300-synth-int8" / "1"

script = load_script("unsigned_int8_activations")


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("calibration")
    generate_dataset(root, 6, 0, 0)  # a train split of 6 images
    return root


def test_the_activations_never_negative_are_exactly_the_ones_nncf_made_unsigned(calibration: Path) -> None:
    manifest = Manifest.read(INT8)
    shipped = onnx.load(str(INT8 / manifest.file))
    inits = {init.name: init for init in shipped.graph.initializer}
    nncf_unsigned = {
        node.input[0]
        for node in shipped.graph.node
        if node.op_type == "QuantizeLinear"
        and node.input[0] not in inits
        and inits[node.input[2]].data_type == onnx.TensorProto.UINT8
    }
    signed = to_signed_int8(onnx.load(str(INT8 / manifest.file)))
    found = script.nonnegative_activations(signed, manifest, str(calibration), images=6)
    assert found == nncf_unsigned
    given_back = to_unsigned_activations(signed, found)
    for init in given_back.graph.initializer:
        original = onnx.numpy_helper.to_array(inits[init.name])
        np.testing.assert_allclose(onnx.numpy_helper.to_array(init), original, rtol=1e-6, err_msg=init.name)

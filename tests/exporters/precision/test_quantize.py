"""``detect-export quantize``: INT8 variants with NNCF, what stays fp32, the AP gate and its refusal.

The default model (a trained SSD300, so AP means something) on a few synthetic images: a sound
calibration passes the gate and writes a QDQ artifact; a calibration on flat grey images wrecks the
activation ranges and is refused with exit 3 and a message naming the flags; nothing is written then.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest

from contract.cpu_classes import CLASS_NAMES, cpu_flags, reachable_classes
from contract.manifest import Accuracy, IsaAccuracy, Manifest
from contract.self_check import read_golden
from exporters.cli import EXIT_GPU_REQUIRED, main
from exporters.evaluation.served_eval import file_sha256
from exporters.onnx.graph import load_checked
from exporters.precision.gate import accuracy_record, gate_failures
from exporters.precision.nncf_int8 import ignored_scope, to_signed_int8, to_unsigned_activations
from exporters.tensorrt.build import export_tensorrt
from exporters.tensorrt.config import TensorRTExportRequest
from exporters.tensorrt.engine import gpu_unavailable_reason, tensorrt_unavailable_reason
from exporters.tensorrt.ops import check_tensorrt_ops
from service.served import cpu_int8_instructions
from training.data.synthetic import generate_dataset

DEFAULT = Path(__file__).resolve().parents[3] / "models" / "ssd300-synth" / "1"
VAL_IMAGES = 12


@pytest.fixture(scope="module")
def small_val(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("val12")
    generate_dataset(root, 0, VAL_IMAGES, 0)
    return root


@pytest.fixture(scope="module")
def grey_split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A COCO folder whose only split holds flat grey images: a deliberately useless calibration set."""
    root = tmp_path_factory.mktemp("grey")
    (root / "val").mkdir()
    (root / "annotations").mkdir()
    images = []
    for i in range(4):
        cv2.imwrite(str(root / "val" / f"{i + 1}.png"), np.full((64, 64, 3), 128, np.uint8))
        images.append({"id": i + 1, "file_name": f"{i + 1}.png", "width": 64, "height": 64})
    categories = [{"id": label.coco_id, "name": label.name} for label in Manifest.read(DEFAULT).labels]
    dataset = {"images": images, "annotations": [], "categories": categories}
    (root / "annotations" / "instances_val.json").write_text(json.dumps(dataset))
    return root


def test_ignored_scope_keeps_preprocessing_and_postprocessing_fp32() -> None:
    manifest = Manifest.read(DEFAULT)
    model = onnx.load(str(DEFAULT / manifest.file))
    scope = ignored_scope(model, manifest)
    ops = {node.name: node.op_type for node in model.graph.node}
    ignored_ops = {ops[name] for name in scope["names"]}
    assert {"NonMaxSuppression", "TopK", "Softmax", "Exp"} <= ignored_ops
    assert "Conv" not in ignored_ops  # the network itself is quantized
    assert "Sigmoid" in scope["types"]


def test_unquantized_precision_is_refused_for_bf16_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["quantize", "--artifact", str(DEFAULT), "--output", str(tmp_path / "x" / "1"), "--data",
         str(tmp_path), "--precision", "bf16", "--unquantized-precision", "bf16"]
    )  # fmt: skip
    assert code != 0
    assert "--unquantized-precision applies to --precision int8 only" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_gate_failures_name_what_dropped() -> None:
    accuracy = Accuracy(
        dataset="d", split="val", images=1, annotations_sha256="0", runtime="r", box_ap=0.40,
        mask_ap=0.50, parent_box_ap=0.41, parent_mask_ap=0.501, box_ap_delta=-0.01, mask_ap_delta=-0.001,
    )  # fmt: skip
    assert gate_failures(accuracy, 0.005) == ["box AP 0.4000 vs the parent's 0.4100 (-0.0100)"]
    assert gate_failures(accuracy, 0.02) == []


def test_a_variant_that_fails_under_any_cpu_class_fails_the_gate() -> None:
    """The record's own figure passes; AVX2's does not: the gate names the class."""
    classes = {
        "avx2": IsaAccuracy(box_ap=0.395, box_ap_delta=-0.015, mask_ap=0.5, mask_ap_delta=-0.001,
                            runtime="openvino[x,CPU,f32]", cap="AVX2"),
        "amx": IsaAccuracy(box_ap=0.409, box_ap_delta=-0.001, runtime="openvino[x,CPU,f32]",
                           cap="AVX512_CORE_AMX"),
    }  # fmt: skip
    accuracy = Accuracy(
        dataset="d", split="val", images=1, annotations_sha256="0", runtime="r", box_ap=0.409,
        parent_box_ap=0.41, parent_mask_ap=0.501, box_ap_delta=-0.001, by_isa=classes,
    )  # fmt: skip
    assert gate_failures(accuracy, 0.005) == ["box AP as avx2 0.3950 vs the parent's 0.4100 (-0.0150)"]
    assert gate_failures(accuracy, 0.02) == []


def test_an_int8_accuracy_measured_on_a_cpu_names_the_cpu_s_int8_instructions() -> None:
    parent = {"bbox": {"AP": 0.51}}

    def record(int8: bool, runtime: str) -> Accuracy:
        measured = {
            "split": "val",
            "images": 2,
            "annotations_sha256": "0",
            "bbox": {"AP": 0.5},
            "runtime": runtime,
        }
        return accuracy_record(measured, parent, dataset="d", max_ap_drop=0.005, int8=int8)

    assert record(True, "openvino[2026.4.0,CPU,bf16]").cpu_int8 == cpu_int8_instructions()
    assert record(True, "tensorrt[11.4,NVIDIA H100]").cpu_int8 is None
    assert record(False, "openvino[2026.4.0,CPU,bf16]").cpu_int8 is None


def test_signed_activations_convert_back_to_nncf_s_unsigned_ones_exactly() -> None:
    """`to_signed_int8` (what TensorRT engines get) and `to_unsigned_activations` undo each other."""
    model = onnx.load(str(INT8 / "model.onnx"))
    initial = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    quantizers = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in initial]
    unsigned = {n.input[0] for n in quantizers if initial[n.input[2]].dtype == np.uint8}
    assert unsigned, "the shipped INT8 artifact keeps NNCF's unsigned activation quantizers"
    assert len(unsigned) < len(quantizers)  # and signed ones where activations go negative
    assert not check_tensorrt_ops(model)["passed"]  # TensorRT's parser takes signed Q/DQ only
    signed = to_signed_int8(model)
    assert check_tensorrt_ops(signed)["passed"]
    back = to_unsigned_activations(signed, unsigned)
    for init in back.graph.initializer:
        value = onnx.numpy_helper.to_array(init)
        assert value.dtype == initial[init.name].dtype, init.name
        np.testing.assert_allclose(value, initial[init.name], rtol=1e-6, err_msg=init.name)


def test_unknown_or_unreachable_cpu_classes_are_refused_with_the_list(
    small_val: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "x" / "1"
    with pytest.raises(SystemExit):
        main(["eval", "--artifact", str(INT8), "--data", str(small_val), "--cpu-classes", "avx3"])
    assert "unknown CPU class ['avx3']" in capsys.readouterr().err and "avx512_bf16" in str(CLASS_NAMES)
    beyond = [name for name in CLASS_NAMES if name not in reachable_classes(cpu_flags())]
    if beyond:  # a machine below AMX: asking for a class above its own is refused, nothing measured
        code = main(["eval", "--artifact", str(INT8), "--data", str(small_val), "--cpu-classes", beyond[-1]])
        assert code == 2 and "above this machine's" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.timeout(600)
def test_int8_variant_passes_the_gate_and_records_its_provenance(small_val: Path, tmp_path: Path) -> None:
    """On any CPU: the gate measures every class this machine reaches, each in a fresh process."""
    output = tmp_path / "models" / "ssd300-synth-int8" / "1"
    code = main(
        ["quantize", "--artifact", str(DEFAULT), "--output", str(output), "--data", str(small_val),
         "--calibration-split", "val", "--calibration-images", "8", "--max-ap-drop", "0.05"]
    )  # fmt: skip
    assert code == 0
    manifest = Manifest.read(output)
    assert manifest.precision == "int8" and manifest.format == "onnx"
    assert manifest.provenance.export_settings["nncf"]["overflow_fix"] == "enable"
    assert manifest.parent is not None
    assert (manifest.parent.name, manifest.parent.version) == ("ssd300-synth", "1")
    assert manifest.parent.file_sha256 == file_sha256(DEFAULT / "model.onnx")
    calibration = manifest.provenance.export_settings["calibration"]
    assert (calibration["split"], calibration["images"], calibration["seed"]) == ("val", 8, 0)
    assert manifest.provenance.export_settings["nncf"]["version"]
    assert manifest.provenance.export_settings["unquantized_weight_storage"] == "float16"  # as the parent
    accuracy = manifest.accuracy
    assert accuracy is not None and accuracy.images == VAL_IMAGES and accuracy.max_ap_drop == 0.05
    assert accuracy.runtime.startswith("openvino[") and accuracy.runtime.endswith(",CPU,f32]")  # as served
    reached = reachable_classes(cpu_flags())
    assert list(accuracy.by_isa) == reached and reached  # every class this machine reaches, lowest first
    for name, figure in accuracy.by_isa.items():
        assert figure.runtime.startswith("openvino[") and figure.cap is not None, name
        assert figure.box_ap_delta == pytest.approx(figure.box_ap - accuracy.parent_box_ap)
    assert accuracy.by_isa[reached[-1]].box_ap == accuracy.box_ap  # the in-process run is the native class
    # golden inputs for the service's self-check at load, with the detections this artifact gave them
    spec = manifest.self_check
    assert spec is not None and spec.images == 3 and spec.min_score == manifest.default_threshold
    golden = read_golden(output, spec, manifest.input)
    assert golden.images.shape == (3, 300, 300, 3) and int(golden.expected["num_detections"].sum()) > 0
    assert accuracy.parent_box_ap is not None and accuracy.parent_box_ap > 0.2
    assert accuracy.box_ap_delta == pytest.approx(accuracy.box_ap - accuracy.parent_box_ap)
    # the quality baseline is counted at the variant's own display threshold, on the gate's images
    assert manifest.quality is not None and manifest.quality.images == VAL_IMAGES
    assert manifest.quality.display_threshold == manifest.default_threshold
    model = load_checked(output / manifest.file)  # the checker with strict shape and type inference
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("QuantizeLinear") >= 20 and "NonMaxSuppression" in ops
    # Nothing downstream of the raw heads is quantized: no Q/DQ feeds post-processing ops.
    producers = {out: node.op_type for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        if node.op_type in ("NonMaxSuppression", "TopK", "Softmax", "Exp"):
            assert all(producers.get(i) != "DequantizeLinear" for i in node.input), node.name
    # The INT8 weights make the file about a quarter of the fp32 parent's (which stores fp16).
    assert (output / manifest.file).stat().st_size < 0.6 * (DEFAULT / "model.onnx").stat().st_size


@pytest.fixture
def grey_calibration(small_val: Path, grey_split: Path, tmp_path: Path) -> Path:
    """A COCO folder: ``grey_split``'s grey images as its train split, ``small_val`` as its val split."""
    calibration = tmp_path / "calib"
    (calibration / "annotations").mkdir(parents=True)
    (calibration / "train").symlink_to(grey_split / "val")
    (calibration / "annotations" / "instances_train.json").symlink_to(
        grey_split / "annotations" / "instances_val.json"
    )
    (calibration / "val").symlink_to(small_val / "val")
    (calibration / "annotations" / "instances_val.json").symlink_to(
        small_val / "annotations" / "instances_val.json"
    )
    return calibration


@pytest.mark.timeout(600)
def test_bad_calibration_is_refused_by_the_gate(
    grey_calibration: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = grey_calibration
    output = tmp_path / "models" / "bad-int8" / "1"
    code = main(
        ["quantize", "--artifact", str(DEFAULT), "--output", str(output), "--data", str(calibration),
         "--calibration-images", "4"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3, err
    assert "loses more than --max-ap-drop 0.005" in err and "box AP" in err
    assert "--no-accuracy-gate" in err and "--accuracy-control" in err
    assert not output.exists()


@pytest.mark.timeout(300)
def test_accuracy_control_returns_harmful_layers_to_fp32_until_the_gate_passes(
    grey_calibration: Path, tmp_path: Path
) -> None:
    """Plain PTQ on grey calibration images loses ~0.45 box AP (the test above refuses it). Accuracy control
    reverts quantizer groups, re-ranking the rest after each, until the served AP is within the allowed
    drop. Allowing 0.1 takes a few reverts (~35 s here); the default 0.005 takes ten (~3.5 min)."""
    output = tmp_path / "models" / "controlled-int8" / "1"
    code = main(
        ["quantize", "--artifact", str(DEFAULT), "--output", str(output), "--data", str(grey_calibration),
         "--calibration-images", "4", "--accuracy-control", "--ranking-images", "4", "--max-ap-drop", "0.1"]
    )  # fmt: skip
    assert code == 0
    manifest = Manifest.read(output)
    assert manifest.provenance.export_settings["nncf"]["function"] == "quantize_with_accuracy_control"
    accuracy = manifest.accuracy
    assert accuracy is not None and accuracy.max_ap_drop == 0.1
    assert accuracy.box_ap_delta is not None and accuracy.box_ap_delta >= -0.1

    # Some layers went back to fp32, not all: fewer quantizers than plain PTQ of the same parent left in
    # the shipped variant, but some.
    def quantizers(artifact: Path) -> int:
        graph = load_checked(artifact / "model.onnx").graph
        return sum(node.op_type == "QuantizeLinear" for node in graph.node)

    assert 0 < quantizers(output) < quantizers(INT8)


INT8 = DEFAULT.parents[1] / "ssd300-synth-int8" / "1"
NO_GPU = gpu_unavailable_reason()
NO_TENSORRT = tensorrt_unavailable_reason()


@pytest.mark.skipif(NO_GPU is None, reason="a GPU is present: the no-GPU path does not run here")
def test_without_gpu_trt_checks_the_int8_qdq_graph_then_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "trt-int8" / "1"
    code = main(["trt", "--artifact", str(INT8), "--output", str(output)])
    err = capsys.readouterr().err
    assert code == EXIT_GPU_REQUIRED, err
    assert "INT8 TensorRT engine not built" in err and "passed the TensorRT op check" in err
    assert not output.exists()
    assert check_tensorrt_ops(to_signed_int8(onnx.load(str(INT8 / "model.onnx"))))["passed"]


@pytest.mark.gpu
@pytest.mark.skipif(NO_TENSORRT is not None, reason=f"needs an NVIDIA GPU with TensorRT: {NO_TENSORRT}")
def test_int8_engine_builds_from_the_qdq_artifact_and_matches_onnxruntime(tmp_path: Path) -> None:
    output = tmp_path / "trt-int8" / "1"
    manifest = export_tensorrt(TensorRTExportRequest(INT8, output, min_batch=1, opt_batch=8, max_batch=64))
    assert (manifest.format, manifest.precision, manifest.file) == ("tensorrt", "int8", "model.plan")
    assert manifest.provenance.export_settings["tensorrt_build"]["result"]["int8"] is True
    engine = manifest.verification["engine"]
    assert engine["contract"]["passed"] and engine["detections_vs_onnxruntime"]["unexplained"] == 0

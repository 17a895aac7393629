"""SSD320 through the one export pipeline: verified against eager PyTorch, the manifest, the output
contract with dynamic batch, COCO AP of eager / ONNX / FP16, and the TensorRT path (op check; engine on
GPU only)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from detectors_testkit import CATEGORIES, make_ssd320_checkpoint
from exporters_testkit import ExportedArtifact

from contract.manifest import OUTPUT_NAMES
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.evaluation.coco_ap import APComparison, evaluate_split
from exporters.evaluation.compare import Detections, match_detections
from exporters.evaluation.verify import (
    eager_detector,
    generated_batches,
    onnx_detector,
    settings_from_manifest,
)
from exporters.onnx.ort_cpu import cpu_session, run_contract
from exporters.onnx.wrappers import wrapper_for
from exporters.precision.fp16 import convert_to_fp16, fp16_eval
from exporters.tensorrt.build import export_tensorrt
from exporters.tensorrt.config import TensorRTExportRequest
from exporters.tensorrt.engine import tensorrt_unavailable_reason
from exporters.tensorrt.ops import check_tensorrt_ops
from training.detectors.ssd320.anchors import AnchorConfig
from training.weights import load_checkpoint

SIZE = 64
RAW = ["raw_box_regression", "raw_cls_logits"]
NO_TENSORRT = tensorrt_unavailable_reason()


@pytest.fixture(scope="module")
def ssd320(tmp_path_factory: pytest.TempPathFactory) -> ExportedArtifact:
    """A tiny SSD320 exported once with verification to ``models/ssd320-tiny/1``; do not modify it."""
    checkpoint = make_ssd320_checkpoint(tmp_path_factory.mktemp("ckpt") / "checkpoint.pt", image_size=SIZE)
    directory = tmp_path_factory.mktemp("repo") / "models" / "ssd320-tiny" / "1"
    manifest = export_onnx(OnnxExportRequest(checkpoint=checkpoint, output=directory))
    return ExportedArtifact(checkpoint, directory, manifest)


@pytest.fixture(scope="module")
def fp16_graph(ssd320: ExportedArtifact, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact's FP16 graph (network in FP16, pre/post-processing FP32), converted once."""
    path = tmp_path_factory.mktemp("fp16") / "model.fp16.onnx"
    onnx.save(convert_to_fp16(onnx.load(str(ssd320.model_path)), "images", RAW), str(path))
    return path


def test_export_is_verified_against_eager_on_two_batch_sizes(ssd320: ExportedArtifact) -> None:
    report = ssd320.manifest.verification
    assert report["passed"], report["summary"]
    assert report["batch_sizes"] == [1, 3]
    assert all(r["max_rel_error"] <= 1e-4 for r in report["raw_outputs"].values())
    # threshold 1e-8: every image fills its K = 100 rows, all matched one-to-one with eager PyTorch
    detections = report["detections"]
    assert detections["reference"] == detections["matched"] == 4 * 100 and detections["unexplained"] == 0


def test_manifest_states_tf_post_processing_and_the_input(ssd320: ExportedArtifact) -> None:
    manifest = ssd320.manifest
    assert (manifest.architecture, manifest.backbone, manifest.format, manifest.precision) == (
        "ssd320",
        "resnet18",
        "onnx",
        "fp32",
    )
    spec = manifest.input
    assert (spec.height, spec.width, spec.resize, spec.color_order, spec.dtype, spec.layout) == (
        SIZE,
        SIZE,
        "stretch",
        "RGB",
        "uint8",
        "NHWC",
    )
    assert (manifest.score_threshold, manifest.iou_threshold, manifest.max_detections) == (1e-8, 0.6, 100)
    settings = manifest.provenance.export_settings
    assert settings["postprocess"]["topk_per_class"] == 100 and settings["raw_outputs"] == RAW
    assert settings["model_args"]["image_size"] == SIZE
    assert [(label.name, label.coco_id) for label in manifest.labels] == [
        (c["name"], c["id"]) for c in CATEGORIES
    ]


def test_output_contract_dynamic_batch_and_anchor_count(ssd320: ExportedArtifact) -> None:
    model = onnx.load(str(ssd320.model_path))
    session = cpu_session(model)
    (graph_input,) = session.get_inputs()
    assert graph_input.shape[1:] == [SIZE, SIZE, 3] and not isinstance(graph_input.shape[0], int)
    assert [o.name for o in session.get_outputs()] == list(OUTPUT_NAMES)
    images = np.random.default_rng(0).integers(0, 256, (2, SIZE, SIZE, 3), dtype=np.uint8)
    both = run_contract(session, images)
    first = run_contract(session, images[:1])
    assert both["detection_boxes"].shape == (2, 100, 4) and both["num_detections"].tolist() == [[100], [100]]
    assert np.array_equal(both["detection_classes"][:1], first["detection_classes"])
    assert np.allclose(both["detection_scores"][:1], first["detection_scores"], atol=1e-6)
    assert np.all(np.diff(both["detection_scores"], axis=1) <= 0)
    assert both["detection_boxes"].min() >= 0.0 and both["detection_boxes"].max() <= 1.0  # clipped as TF
    shapes = {v.name: v for v in model.graph.value_info}
    assert [d.dim_value for d in shapes[RAW[0]].type.tensor_type.shape.dim][1:] == [
        AnchorConfig(SIZE).num_anchors,
        4,
    ]


def test_detections_equal_eager_on_another_input(ssd320: ExportedArtifact) -> None:
    ckpt = load_checkpoint(ssd320.checkpoint)
    wrapper = wrapper_for(ckpt)
    settings = settings_from_manifest(ssd320.manifest, wrapper)
    (batch,) = generated_batches(wrapper.resize, sizes=(2,), seed=11)
    eager = wrapper.eager_detections(wrapper.raw_outputs(batch), settings)
    exported = Detections.from_contract(run_contract(cpu_session(ssd320.model_path), batch))
    for ref, got in zip(eager, exported, strict=True):
        assert len(ref.scores) == len(got.scores) == 100
        np.testing.assert_allclose(got.scores, ref.scores, rtol=0, atol=1e-5)
        result = match_detections(
            ref,
            got,
            box_tol=1e-4,
            score_tol=1e-5,
            score_threshold=1e-8,
            iou_threshold=0.6,
            max_detections=100,
        )
        assert result["matched"] == 100, result


def test_coco_ap_of_eager_onnx_and_fp16_agree(
    ssd320: ExportedArtifact, fp16_graph: Path, synthetic_data: Path, tmp_path: Path
) -> None:
    ckpt = load_checkpoint(ssd320.checkpoint)
    wrapper = wrapper_for(ckpt)
    settings = settings_from_manifest(ssd320.manifest, wrapper)
    detectors = {
        "eager": eager_detector(wrapper, settings),
        "onnx": onnx_detector(cpu_session(ssd320.model_path)),
    }
    evaluators = evaluate_split(
        detectors, root=str(synthetic_data), split="val", categories=ckpt.categories, resize=wrapper.resize
    )
    ap = APComparison.of(evaluators, "eager", "onnx")
    assert {"AP", "AP50"} <= set(ap.reference) and ap.within(1e-3)
    artifact = tmp_path / "models" / "ssd320-tiny" / "1"
    shutil.copytree(ssd320.directory, artifact)
    fp16 = fp16_eval(artifact, fp16_graph, str(synthetic_data), None, None, write=False)
    assert fp16.passed and fp16.coco is not None and abs(fp16.coco.ap.ap_delta) <= 0.002
    assert all(r["max_rel_error"] <= 1e-2 for r in fp16.raw_outputs.values())


def test_fp32_and_fp16_graphs_use_only_tensorrt_ops(ssd320: ExportedArtifact, fp16_graph: Path) -> None:
    for model in (onnx.load(str(ssd320.model_path)), onnx.load(str(fp16_graph))):
        report = check_tensorrt_ops(model)
        assert report["passed"], (report["unsupported"], report["problems"])
        assert {"NonMaxSuppression", "TopK", "Conv", "Resize", "Sigmoid"} <= set(report["op_counts"])


@pytest.mark.gpu
@pytest.mark.skipif(NO_TENSORRT is not None, reason=f"needs an NVIDIA GPU with TensorRT: {NO_TENSORRT}")
def test_tensorrt_engine_matches_onnxruntime(ssd320: ExportedArtifact, tmp_path: Path) -> None:
    output = tmp_path / "trt" / "1"
    request = TensorRTExportRequest(ssd320.directory, output, min_batch=1, opt_batch=2, max_batch=4)
    manifest = export_tensorrt(request)
    assert (manifest.format, manifest.precision, manifest.architecture) == ("tensorrt", "fp16", "ssd320")
    engine = manifest.verification["engine"]
    assert engine["contract"]["passed"] and engine["detections_vs_onnxruntime"]["unexplained"] == 0

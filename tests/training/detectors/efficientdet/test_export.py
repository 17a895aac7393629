"""EfficientDet-D0 through the one export pipeline: letterbox manifest, EMA weights, effdet-equivalent
post-processing with a TensorRT-sized top-k, COCO AP through the letterbox geometry, FP16."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from detectors_testkit import make_efficientdet_checkpoint
from exporters_testkit import ExportedArtifact

from contract.manifest import Manifest
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.evaluation.coco_ap import evaluate_split
from exporters.evaluation.compare import Detections, match_detections, summarize_matches
from exporters.evaluation.verify import generated_batches, manifest_resize, verify_artifact
from exporters.onnx.export import DetectionGraph
from exporters.onnx.graph import with_outputs
from exporters.onnx.ort_cpu import cpu_session, run_contract
from exporters.onnx.wrappers import wrapper_for
from exporters.precision.fp16 import Fp16Tolerances, compare_fp16, convert_to_fp16
from training.data.coco import load_coco, resolve_split
from training.data.letterbox import letterbox_geometry, letterbox_resize
from training.detectors.efficientdet.export import EfficientDetWrapper
from training.detectors.efficientdet.postprocess import PostprocessConfig, detections
from training.weights import load_checkpoint


@pytest.fixture(scope="module")
def effdet_export(tmp_path_factory: pytest.TempPathFactory) -> ExportedArtifact:
    root = tmp_path_factory.mktemp("effdet")
    checkpoint = make_efficientdet_checkpoint(root / "checkpoint.pt")
    directory = root / "models" / "effdet" / "1"
    manifest = export_onnx(OnnxExportRequest(checkpoint=checkpoint, output=directory))
    return ExportedArtifact(checkpoint, directory, manifest)


def wrapper_of(artifact: ExportedArtifact) -> EfficientDetWrapper:
    wrapper = wrapper_for(load_checkpoint(artifact.checkpoint), "efficientdet-d0")
    assert isinstance(wrapper, EfficientDetWrapper)
    return wrapper


def test_manifest_describes_letterbox_and_global_topk(effdet_export: ExportedArtifact) -> None:
    manifest = effdet_export.manifest
    assert manifest.architecture == "efficientdet-d0" and manifest.backbone == "tf_efficientnet_b0"
    assert (manifest.input.height, manifest.input.width, manifest.input.resize) == (128, 128, "letterbox")
    assert manifest.input.pad_value == (124, 116, 104)  # ImageNet mean as uint8
    assert [label.coco_id for label in manifest.labels] == [2, 5, 11]
    post = manifest.provenance.export_settings["postprocess"]
    assert post["pre_nms_topk"] == 3000 and post["iou_threshold"] == 0.5 and manifest.max_detections == 100
    verification = manifest.verification
    assert verification["passed"], verification["summary"]
    assert verification["batch_sizes"] == [1, 3] and verification["detections"]["matched"] > 100
    model = onnx.load(str(effdet_export.model_path))
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("NonMaxSuppression") == 1
    for node in model.graph.node:  # TensorRT needs every TopK's K < 3840
        if node.op_type == "TopK":
            k = next(i for i in model.graph.initializer if i.name == node.input[1])
            assert int(onnx.numpy_helper.to_array(k).reshape(-1)[0]) < 3840


def test_graph_runs_the_ema_weights(effdet_export: ExportedArtifact) -> None:
    wrapper = wrapper_of(effdet_export)
    names = effdet_export.manifest.provenance.export_settings["raw_outputs"]
    session = cpu_session(with_outputs(onnx.load(str(effdet_export.model_path)), names))
    batch = generated_batches(wrapper.resize)[1]  # three of the images the heads were scaled on
    graph = session.run(names, {"images": batch})
    eager_ema = wrapper.raw_outputs(batch)
    np.testing.assert_allclose(graph[0], eager_ema[0].numpy(), atol=1e-4 * np.abs(graph[0]).max())
    ckpt = load_checkpoint(effdet_export.checkpoint)
    ckpt.model_ema = None  # the raw (non-averaged) weights
    raw_wrapper = wrapper_for(ckpt, "efficientdet-d0")
    assert np.abs(raw_wrapper.raw_outputs(batch)[0].numpy() - graph[0]).max() > 1e-2


def test_detections_match_effdets_top5000_postprocessing(effdet_export: ExportedArtifact) -> None:
    """The graph's detections are effdet's (top 5000, class-aware NMS 0.5, 100 kept) exactly, both with
    fewer than 3000 candidates above the score threshold (the lower top-k drops nothing) and with more
    (NMS only removes lower-scored boxes, so when 100 survive among the top 3000, the rest never count)."""
    wrapper = wrapper_of(effdet_export)
    manifest = effdet_export.manifest
    session = cpu_session(effdet_export.model_path)
    effdet = PostprocessConfig(max_detection_points=5000, score_threshold=manifest.score_threshold)
    matches = []
    candidates: list[int] = []
    for batch in generated_batches(wrapper.resize, sizes=(1, 3)):  # the images the heads were scaled on
        raw = wrapper.raw_outputs(batch)
        scores = torch.cat([r.permute(0, 2, 3, 1).reshape(len(batch), -1) for r in raw[:5]], 1).sigmoid()
        candidates.extend((scores > manifest.score_threshold).sum(1).tolist())
        reference = detections(list(raw[:5]), list(raw[5:]), wrapper.anchors_yxyx, 3, 128, effdet)
        graph = Detections.from_contract(run_contract(session, batch))
        for ref, got in zip(reference, graph, strict=True):
            expected = Detections(
                (ref["boxes"] / 128.0).numpy(), ref["scores"].numpy(), ref["labels"].numpy() - 1
            )
            matches.append(
                match_detections(
                    expected,
                    got,
                    box_tol=1e-4,
                    score_tol=EfficientDetWrapper.tolerance_floors["score"],
                    score_threshold=0.05,
                    iou_threshold=0.5,
                    max_detections=100,
                )
            )
    summary = summarize_matches(matches)
    assert summary["matched"] > 0 and summary["unexplained"] == 0
    assert min(candidates) < 3000 < max(candidates)  # both regimes were tested


def test_coco_ap_maps_letterboxed_boxes_back_to_the_originals(synthetic_data: Path) -> None:
    """A detector that answers the ground truth, normalized to the letterboxed input: AP 1 only if
    coco_ap maps back through the letterbox, as the service does (stretching would lose boxes)."""
    _, annotation_file = resolve_split(synthetic_data, "val")
    coco = load_coco(annotation_file)
    categories = [{"id": c["id"], "name": c["name"]} for c in coco.loadCats(coco.getCatIds())]
    order = [c["id"] for c in categories]
    ids = iter(sorted(coco.getImgIds()))

    def oracle(images: np.ndarray) -> list[Detections]:
        out = []
        for _ in range(len(images)):
            info = coco.imgs[next(ids)]
            anns = coco.imgToAnns[info["id"]]
            boxes = np.array([a["bbox"] for a in anns], dtype=np.float32)
            boxes[:, 2:] += boxes[:, :2]
            geometry = letterbox_geometry(info["height"], info["width"], 96, 96)
            normalized = geometry.boxes_to_network(boxes) / 96.0
            classes = np.array([order.index(a["category_id"]) for a in anns])
            out.append(Detections(normalized, np.ones(len(anns), dtype=np.float32), classes))
        return out

    evaluators = evaluate_split(
        {"oracle": oracle},
        root=str(synthetic_data),
        split="val",
        categories=categories,
        resize=lambda image: letterbox_resize(image, 96, 96)[0],
        batch_size=2,
        to_original=lambda boxes, size: letterbox_geometry(*size, 96, 96).boxes_to_original(boxes),
    )
    assert evaluators["oracle"].stats["bbox"]["AP"] > 0.99


def test_verify_with_data_compares_onnx_and_eager_ap(
    effdet_export: ExportedArtifact, synthetic_data: Path, tmp_path: Path
) -> None:
    report = verify_artifact(
        effdet_export.directory, effdet_export.checkpoint, data=str(synthetic_data), write=False
    )
    assert report.passed, report.summary
    assert report.coco is not None and abs(report.coco.ap.ap_delta) <= 1e-3
    assert report.coco.ap.reference["AR100"] == pytest.approx(report.coco.ap.candidate["AR100"], abs=1e-3)


def test_fp16_graph_keeps_detections_close(effdet_export: ExportedArtifact) -> None:
    manifest = effdet_export.manifest
    fp32 = onnx.load(str(effdet_export.model_path))
    raw = manifest.provenance.export_settings["raw_outputs"]
    fp16 = convert_to_fp16(fp32, manifest.input.name, raw)
    report = compare_fp16(
        fp32,
        fp16,
        raw,
        generated_batches(wrapper_of(effdet_export).resize, sizes=(1, 2)),
        score_threshold=manifest.score_threshold,
        iou_threshold=manifest.iou_threshold,
        max_detections=manifest.max_detections,
        # This random network amplifies FP16 rounding on one of these images to ~1.4% of the output
        # range, beyond the default 1%; FP16's real cost is the AP delta that ``detect-export fp16-eval``
        # measures on a trained model.
        tolerances=Fp16Tolerances(raw_rel=3e-2),
    )
    assert report.passed, (report.raw_outputs, report.contract)
    assert report.fp16_share["conv_fp16"] == report.fp16_share["conv_total"]


@pytest.mark.gpu
def test_tensorrt_engine_builds_from_the_artifact(effdet_export: ExportedArtifact, tmp_path: Path) -> None:
    from exporters.tensorrt.build import export_tensorrt
    from exporters.tensorrt.engine import tensorrt_unavailable_reason

    if (reason := tensorrt_unavailable_reason()) is not None:
        pytest.skip(f"needs an NVIDIA GPU with TensorRT: {reason}")
    from exporters.tensorrt.config import TensorRTExportRequest

    manifest = export_tensorrt(
        TensorRTExportRequest(
            artifact=effdet_export.directory, output=tmp_path / "models" / "effdet-trt" / "1"
        )
    )
    assert manifest.format == "tensorrt" and manifest.input.resize == "letterbox"


def test_int8_keeps_bifpn_fusion_and_class_net_fp32(effdet_export: ExportedArtifact) -> None:
    import re

    from exporters.precision.nncf_int8 import ignored_scope, quantize_batches

    manifest = Manifest.read(effdet_export.directory)
    model = onnx.load(str(effdet_export.directory / manifest.file))
    scope = ignored_scope(model, manifest)
    # NNCF matches IgnoredScope patterns with re.search.
    kept = {n.name for n in model.graph.node if any(re.search(p, n.name) for p in scope["patterns"])}
    fusion = {name for name in kept if "/class_net/" not in name}
    fusion_ops = {n.op_type for n in model.graph.node if n.name in fusion}
    class_convs = {n.name for n in model.graph.node if n.op_type == "Conv" and "/class_net/" in n.name}
    box_convs = {n.name for n in model.graph.node if n.op_type == "Conv" and "/box_net/" in n.name}
    assert class_convs and class_convs <= kept and box_convs and not box_convs & kept
    # After simplification the fusion is Div (each input times its weight, over the weights' sum; a Mul
    # too where a weight does not fold) and Add (the weighted sum: no stack along a new axis and
    # ReduceSum, which OpenVINO runs with a reference kernel).
    assert {"Div", "Add"} <= fusion_ops <= {"Mul", "Div", "Add"}, sorted(fusion)[:10]
    assert "Conv" not in fusion_ops  # the resampling convolutions inside combine/ are quantized
    batches = generated_batches(manifest_resize(manifest))
    quantized = quantize_batches(model, manifest, batches, scope)
    dequantized = {o for n in quantized.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    assert any(n.op_type == "QuantizeLinear" for n in quantized.graph.node)
    for node in quantized.graph.node:
        if node.name in kept:
            assert not set(node.input) & dequantized, node.name
    box_net_inputs = {i for n in quantized.graph.node if n.name in box_convs for i in n.input}
    assert box_net_inputs & dequantized  # the box net is quantized


def test_fusion_by_adds_equals_effdets_stack_and_sum(effdet_export: ExportedArtifact) -> None:
    from training.detectors.efficientdet.effdet_compat import FpnCombine

    wrapper = wrapper_of(effdet_export)
    combines = [m for m in wrapper.network.modules() if isinstance(m, FpnCombine)]
    assert combines and all("forward" in vars(m) for m in combines)  # every fusion rewritten
    images = torch.from_numpy(generated_batches(wrapper.resize)[1]).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        rewritten = wrapper.network(images)
        for module in combines:
            del module.forward  # back to effdet's FpnCombine.forward
        original = wrapper.network(images)
    for ours, theirs in zip(rewritten, original, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * float(theirs.abs().max()))


def test_the_graph_module_runs_under_fp16_autocast(effdet_export: ExportedArtifact) -> None:
    """PyTorch under fp16 autocast (as on a GPU): the network in fp16, the post-processing (the TopK over
    logits masked at the threshold's logit) in fp32, the fp32 module's detections within fp16's rounding."""
    wrapper = wrapper_of(effdet_export)
    graph = DetectionGraph(wrapper, wrapper.default_settings, raw_outputs=False).eval()
    images = torch.from_numpy(generated_batches(wrapper.resize)[1])
    with torch.inference_mode():
        full = graph(images)
        with torch.autocast("cpu", dtype=torch.float16):
            half = graph(images)
    assert [t.dtype for t in half] == [t.dtype for t in full]
    assert int(full[0].sum()) > 0
    # A random network's scores crowd the threshold: fp16 rounding moves a few across it.
    assert (half[0] - full[0]).abs().max() <= 3
    # fp16 rounding depends on the CPU's fp16 kernels: this untrained network's best scores moved by 0.012 on
    # a Xeon with AVX-512 FP16, by 0.003 with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on the same machine.
    torch.testing.assert_close(half[2][:, 0], full[2][:, 0], rtol=0, atol=0.02, msg="best score")

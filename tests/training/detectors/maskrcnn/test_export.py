"""Mask R-CNN export: dynamic batch, masks, verification against torchvision, TensorRT ops, serving.

One tiny model for the module: torchvision's Mask R-CNN on a ResNet-18 FPN at 96x96 with random
weights. Its mask logits are scaled up so every mask saturates into a clear shape (probabilities near 0
or 1, thresholds never ambiguous), and its class logits scaled down so scores spread over (0.05, 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from detectors_testkit import MASKRCNN_SIZE, make_maskrcnn_checkpoint
from service_testkit import encode, make_settings, start_client
from torchvision.models.detection.rpn import concat_box_prediction_layers
from torchvision.ops.poolers import LevelMapper

from bench.backend.artifact import run_bench
from bench.backend.command import add_arguments
from contract.manifest import MASK_OUTPUT, Manifest
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.errors import ExportError
from exporters.evaluation.verify import (
    generated_batches,
    manifest_resize,
    raw_names_from_manifest,
    verify_artifact,
)
from exporters.onnx.wrappers import wrapper_for
from exporters.precision.fp16 import compare_fp16, convert_to_fp16, fp16_scopes
from exporters.tensorrt.ops import check_tensorrt_ops
from service.app import create_app
from training.data.letterbox import letterbox_resize
from training.data.synthetic import render_sample
from training.detectors.maskrcnn.export import MultiScaleRoIAlign
from training.detectors.maskrcnn.model import PAD_VALUE, detect, normalize
from training.masks import mask_iou, paste_masks, rle_to_mask
from training.weights import build_checkpoint_model, load_checkpoint

SIZE = MASKRCNN_SIZE


@pytest.fixture(scope="module")
def mask_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_maskrcnn_checkpoint(tmp_path_factory.mktemp("mrcnn") / "checkpoint.pt")


@pytest.fixture(scope="module")
def mask_artifact(mask_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("repo") / "models" / "mrcnn" / "1"
    export_onnx(OnnxExportRequest(checkpoint=mask_checkpoint, output=directory, max_batch_size=4))
    return directory


def test_export_matches_torchvision_with_masks_at_two_batch_sizes(mask_artifact: Path) -> None:
    manifest = Manifest.read(mask_artifact)
    report = manifest.verification
    assert report["passed"], report["summary"]
    assert report["batch_sizes"] == [1, 3]  # one graph, dynamic batch, checked at two sizes
    assert report["detections"]["matched"] == report["detections"]["reference"] > 0
    assert report["masks"]["pairs"] == report["detections"]["matched"]
    assert report["masks"]["max_abs_error"] <= 1e-3
    assert manifest.outputs[-1] == MASK_OUTPUT and manifest.mask_size == (28, 28)
    assert manifest.dynamic_batch and manifest.max_batch_size == 4
    assert manifest.input.resize == "letterbox" and manifest.input.pad_value == PAD_VALUE
    assert manifest.max_detections == 20 and manifest.score_threshold == pytest.approx(0.05)
    model = onnx.load(str(mask_artifact / manifest.file))
    batch_dims = {o.name: o.type.tensor_type.shape.dim[0].dim_param for o in model.graph.output}
    assert all(batch_dims.values()), batch_dims  # every output's batch dimension is symbolic


def test_every_op_is_tensorrt_supported_and_fp16_keeps_the_contract(mask_artifact: Path) -> None:
    manifest = Manifest.read(mask_artifact)
    fp32 = onnx.load(str(mask_artifact / manifest.file))
    ops = check_tensorrt_ops(fp32)
    assert ops["passed"], ops
    assert {"NonMaxSuppression", "RoiAlign", "NonZero", "ScatterND"} <= set(ops["op_counts"])
    raw = raw_names_from_manifest(manifest)
    fp16 = convert_to_fp16(fp32, manifest.input.name, raw, fp16_scopes(manifest))
    assert check_tensorrt_ops(fp16)["passed"]
    report = compare_fp16(
        fp32,
        fp16,
        raw,
        generated_batches(manifest_resize(manifest), sizes=(2,)),
        score_threshold=manifest.score_threshold,
        iou_threshold=manifest.iou_threshold,
        max_detections=manifest.max_detections,
    )
    assert report.contract.passed, report.contract
    assert report.masks_vs_fp32 is not None and report.masks_vs_fp32["pairs"] > 0
    # the backbone, FPN and RPN head and the RoI heads' layers (fp16_scopes) all run in FP16
    share = report.fp16_share
    assert share["conv_fp16"] == share["conv_total"], share


def test_flattening_and_levels_are_torchvisions(mask_checkpoint: Path) -> None:
    wrapper = wrapper_for(load_checkpoint(mask_checkpoint), "maskrcnn_resnet50_fpn")
    images = torch.randint(0, 256, (2, SIZE, SIZE, 3), dtype=torch.uint8).numpy()
    objectness, deltas, *features = wrapper.raw_outputs(images)
    logits, regression = wrapper.model.rpn.head(features)
    ref_objectness, ref_deltas = concat_box_prediction_layers(logits, regression)
    torch.testing.assert_close(objectness.reshape(-1, 1), ref_objectness, rtol=0, atol=0)
    torch.testing.assert_close(deltas.reshape(-1, 4), ref_deltas, rtol=0, atol=0)
    pool = MultiScaleRoIAlign(wrapper.scales[:4], 7, 2, 256)
    boxes = torch.tensor([[0, 0, 3, 3], [10, 10, 90, 95], [0, 0, 500, 400], [5, 5, 5, 5.0]])
    expected = LevelMapper(2, 5)([boxes])
    torch.testing.assert_close(pool.levels(boxes), expected)


def test_per_class_topk_below_the_proposals_is_refused(mask_checkpoint: Path, tmp_path: Path) -> None:
    request = OnnxExportRequest(checkpoint=mask_checkpoint, output=tmp_path / "m" / "1", topk_per_class=10)
    with pytest.raises(ExportError, match="topk_per_class must be >= 40"):
        export_onnx(request)
    assert not (tmp_path / "m").exists()


def test_served_rle_masks_are_the_eager_models_masks(mask_artifact: Path, mask_checkpoint: Path) -> None:
    """POST /detect on the artifact: each RLE decodes (pycocotools) to the mask eager torchvision pastes."""
    model = build_checkpoint_model(load_checkpoint(mask_checkpoint)).eval()
    client = start_client(create_app(make_settings(mask_artifact.parents[1], max_batch_size=2)))
    try:
        rng = np.random.default_rng(5)
        compared = 0
        for _ in range(2):
            image, _objects = render_sample(rng)
            height, width = image.shape[:2]
            response = client.post(
                "/detect", content=encode(image, ".png"), headers={"content-type": "image/png"}
            )
            assert response.status_code == 200, response.text
            served = response.json()["detections"]

            canvas, letterbox = letterbox_resize(image, SIZE, SIZE, PAD_VALUE)
            (eager,) = detect(model, normalize(torch.from_numpy(canvas[None])))
            boxes = torch.from_numpy(letterbox.boxes_to_original(eager["boxes"].numpy() / SIZE))
            masks = paste_masks(eager["masks"][:, 0], boxes, height, width).numpy()
            for det in served:
                got = np.array([det["box"][k] for k in ("x1", "y1", "x2", "y2")])
                match = [
                    i
                    for i in range(len(boxes))
                    if int(eager["labels"][i]) - 1 == det["class_id"]
                    and abs(float(eager["scores"][i]) - det["score"]) < 1e-4
                    and np.abs(boxes[i].numpy() - got).max() < 0.05
                ]
                assert len(match) == 1, det
                mask = rle_to_mask(det["mask"])
                assert mask.shape == (height, width)
                assert 0 < mask.sum() < mask.size  # a real shape, neither empty nor everything
                assert mask_iou(mask, masks[match[0]]) >= 0.95
                compared += 1
        assert compared >= 5
        polygons = client.post(
            "/detect",
            params={"mask_format": "polygon"},
            content=encode(image, ".png"),
            headers={"content-type": "image/png"},
        ).json()["detections"]
        assert all("mask" not in d and d["polygons"] for d in polygons)
    finally:
        client.__exit__(None, None, None)


def test_coco_verification_and_bench_cover_masks(
    mask_artifact: Path, mask_checkpoint: Path, synthetic_data: Path, tmp_path: Path
) -> None:
    report = verify_artifact(mask_artifact, mask_checkpoint, data=str(synthetic_data), write=False)
    assert report.coco is not None
    coco = report.coco.to_dict()
    assert abs(coco["ap_delta"]) <= 1e-3 and abs(coco["mask_ap_delta"]) <= 1e-3
    assert set(coco["onnx_segm"]) >= {"AP", "AP50"}
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--artifact", str(mask_artifact), "--batch-sizes", "1,2", "--iterations", "1"])
    bench = run_bench(args)
    assert [row["batch"] for row in bench["rows"]] == [1, 2]


def test_int8_keeps_roi_heads_and_mask_sigmoid_fp32_and_their_weights_fp16(mask_artifact: Path) -> None:
    import re

    from exporters.precision.nncf_int8 import ignored_scope, quantize_batches

    manifest = Manifest.read(mask_artifact)
    model = onnx.load(str(mask_artifact / manifest.file))
    scope = ignored_scope(model, manifest)
    # NNCF matches IgnoredScope patterns with re.search; names are kept whole.
    kept = set(scope["names"]) | {
        n.name for n in model.graph.node if any(re.search(p, n.name) for p in scope["patterns"])
    }
    heads = [n for n in model.graph.node if n.name.startswith(("/decoder/box_head/", "/masks/mask_head/"))]
    assert heads and all(n.name in kept for n in heads)
    assert any(n.op_type == "RoiAlign" and n.name in kept for n in model.graph.node)
    quantized = quantize_batches(model, manifest, generated_batches(manifest_resize(manifest)), scope)
    dequantized = {o for n in quantized.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    convs = [n for n in quantized.graph.node if n.op_type == "Conv"]
    assert any(set(n.input) & dequantized for n in convs)  # the backbone is quantized
    for node in quantized.graph.node:
        if node.name in kept or node.op_type in ("Sigmoid", "RoiAlign", "NonMaxSuppression"):
            assert not set(node.input) & dequantized, node.name
    # The heads' weights stay float32 in the graph; stored as float16 they halve and run the same.
    from onnx import TensorProto

    from exporters.onnx.graph import restore_weights_fp32
    from exporters.onnx.ort_cpu import cpu_session
    from exporters.precision.nncf_int8 import store_kept_weights_fp16

    stored = store_kept_weights_fp16(quantized)
    quantizers = [n for n in stored.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    inits = {i.name: i for i in stored.graph.initializer}
    assert any(i.data_type == TensorProto.FLOAT16 for i in inits.values())
    big = [i for i in inits.values() if i.data_type == TensorProto.FLOAT and np.prod(i.dims) >= 1024]
    assert {i.name for i in big} <= {name for n in quantizers for name in n.input}
    assert all(name in inits for n in quantizers for name in n.input[1:])  # scales, zero points: constants
    assert stored.ByteSize() < 0.8 * quantized.ByteSize()
    images = generated_batches(manifest_resize(manifest))[0]
    feed = {manifest.input.name: images}
    half = cpu_session(stored).run(None, feed)
    exact = cpu_session(restore_weights_fp32(stored)).run(None, feed)
    for a, b in zip(half, exact, strict=True):
        np.testing.assert_array_equal(a, b)  # restoring is exact, so the float16 storage lost nothing more

"""The ONNX artifact: graph vs eager PyTorch, the output contract, dynamic batch, the manifest."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from detectors_testkit import CATEGORIES
from exporters_testkit import ExportedArtifact

from contract.manifest import MANIFEST_FILE, OUTPUT_NAMES, Manifest
from exporters.evaluation.compare import Detections, match_detections
from exporters.evaluation.verify import generated_batches
from exporters.onnx.export import RAW_PREFIX
from exporters.onnx.graph import with_outputs
from exporters.onnx.ort_cpu import cpu_session, run_contract
from exporters.onnx.postprocess_graph import PostprocessSettings
from exporters.onnx.wrappers import wrapper_for
from training.checkpoint import sha256_file
from training.weights import load_checkpoint


@pytest.fixture(scope="module")
def wrapper(exported: ExportedArtifact):  # type: ignore[no-untyped-def]
    ckpt = load_checkpoint(exported.checkpoint)
    return wrapper_for(ckpt)


@pytest.fixture(scope="module")
def batches(wrapper) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """A batch of 1 and a batch of 3 (synthetic scene, noise, gradient): different sizes and content."""
    return generated_batches(wrapper.resize, sizes=(1, 3), seed=11)


@pytest.fixture(scope="module")
def eager_raw(wrapper, batches):  # type: ignore[no-untyped-def]
    """Eager head outputs per batch (computed once: eager PyTorch is the slow part of these tests)."""
    return [wrapper.raw_outputs(batch) for batch in batches]


def test_raw_head_outputs_match_eager(exported: ExportedArtifact, wrapper, batches, eager_raw) -> None:  # type: ignore[no-untyped-def]
    raw = [RAW_PREFIX + n for n in wrapper.raw_output_names]
    session = cpu_session(with_outputs(onnx.load(str(exported.model_path)), raw))
    for batch, eager in zip(batches, eager_raw, strict=True):
        got = session.run(raw, {"images": batch})
        for name, ref, out in zip(raw, eager, got, strict=True):
            assert out.shape == tuple(ref.shape), name
            np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_detections_equal_eager_postprocessing_with_export_settings(
    exported: ExportedArtifact,
    wrapper,  # type: ignore[no-untyped-def]
    batches: list[np.ndarray],
    eager_raw,  # type: ignore[no-untyped-def]
) -> None:
    settings = PostprocessSettings(
        exported.manifest.score_threshold,
        exported.manifest.iou_threshold,
        200,
        exported.manifest.max_detections,
    )
    session = cpu_session(exported.model_path)
    compared = 0
    for batch, raw in zip(batches, eager_raw, strict=True):
        eager = wrapper.eager_detections(raw, settings)
        for ref, got in zip(eager, Detections.from_contract(run_contract(session, batch)), strict=True):
            # Untrained heads: every class passes 0.05 at thousands of anchors, so top-k, NMS and the cut
            # at K = 100 all decide what is kept.
            assert len(ref.scores) == len(got.scores) == settings.max_detections
            # Both are sorted by score, so the score columns agree row by row ...
            np.testing.assert_allclose(got.scores, ref.scores, rtol=0, atol=1e-5)
            # ... while two near-equal scores (within float noise) may swap rows: match one-to-one.
            result = match_detections(
                ref,
                got,
                box_tol=1e-4,
                score_tol=1e-5,
                score_threshold=0.05,
                iou_threshold=0.5,
                max_detections=100,
            )
            assert result["matched"] == len(ref.scores), result
            assert result["max_box_error"] <= 1e-4 and result["max_score_error"] <= 1e-5
            compared += len(ref.scores)
    assert compared == 400


def test_output_contract_and_dynamic_batch(exported: ExportedArtifact) -> None:
    session = cpu_session(exported.model_path)
    (graph_input,) = session.get_inputs()
    assert (graph_input.name, graph_input.type) == ("images", "tensor(uint8)")
    assert graph_input.shape[1:] == [300, 300, 3] and not isinstance(graph_input.shape[0], int)
    assert [o.name for o in session.get_outputs()] == list(OUTPUT_NAMES)
    k = exported.manifest.max_detections
    rng = np.random.default_rng(0)
    for batch in (1, 2, 5):
        outputs = run_contract(session, rng.integers(0, 256, (batch, 300, 300, 3), dtype=np.uint8))
        assert outputs["num_detections"].shape == (batch, 1) and outputs["num_detections"].dtype == np.int32
        assert (
            outputs["detection_boxes"].shape == (batch, k, 4)
            and outputs["detection_boxes"].dtype == np.float32
        )
        assert (
            outputs["detection_scores"].shape == (batch, k)
            and outputs["detection_scores"].dtype == np.float32
        )
        assert (
            outputs["detection_classes"].shape == (batch, k)
            and outputs["detection_classes"].dtype == np.int32
        )
        assert np.all(np.diff(outputs["detection_scores"], axis=1) <= 0)
        assert outputs["detection_classes"].min() >= 0 and outputs["detection_classes"].max() < len(
            CATEGORIES
        )


def test_graph_is_checked_simplified_and_uses_onnx_nms(exported: ExportedArtifact) -> None:
    model = onnx.load(str(exported.model_path))
    onnx.checker.check_model(model, full_check=True)
    ops = {node.op_type for node in model.graph.node}
    assert {"NonMaxSuppression", "TopK", "ScatterND"} <= ops
    assert not ops & {"Loop", "If", "Identity"}  # no control flow; slimmed
    assert [o.name for o in model.graph.output] == list(OUTPUT_NAMES)  # raw heads are not outputs
    produced = {out for node in model.graph.node for out in node.output}
    assert {"raw_locs", "raw_confs"} <= produced  # ...but stay addressable for verification
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17


def test_manifest_is_complete(exported: ExportedArtifact) -> None:
    manifest = Manifest.read(exported.directory)
    assert manifest == exported.manifest
    assert (manifest.name, manifest.version, manifest.file) == ("tiny", "1", "model.onnx")
    assert (manifest.architecture, manifest.backbone, manifest.format, manifest.precision) == (
        "ssd300",
        "resnet18",
        "onnx",
        "fp32",
    )
    spec = manifest.input
    assert (spec.name, spec.height, spec.width, spec.resize, spec.color_order, spec.dtype, spec.layout) == (
        "images",
        300,
        300,
        "stretch",
        "RGB",
        "uint8",
        "NHWC",
    )
    assert [(label.name, label.coco_id) for label in manifest.labels] == [
        (c["name"], c["id"]) for c in CATEGORIES
    ]
    assert (manifest.score_threshold, manifest.iou_threshold, manifest.max_detections) == (0.05, 0.5, 100)
    assert manifest.max_batch_size == 32 and manifest.dynamic_batch
    prov = manifest.provenance
    assert prov.checkpoint_sha256 == sha256_file(exported.checkpoint)
    assert prov.training_config["note"] == "exporters test checkpoint"
    assert prov.export_settings["opset"] == 17 and prov.export_settings["raw_outputs"] == [
        "raw_locs",
        "raw_confs",
    ]
    assert prov.export_settings["postprocess"]["topk_per_class"] == 200
    assert {"torch", "onnx", "onnxruntime", "onnxslim"} <= set(prov.tool_versions)
    assert prov.created_at
    assert manifest.verification["passed"] and manifest.verification["batch_sizes"] == [1, 3]
    assert manifest.verification["detections"]["unexplained"] == 0
    assert manifest.metrics["coco_ap"] == 0.125 and manifest.metrics["dataset"] == "val"
    assert not [p for p in exported.directory.parent.iterdir() if p.name.startswith(".")]  # no leftovers
    assert sorted(p.name for p in exported.directory.iterdir()) == [MANIFEST_FILE, "model.onnx"]

"""Rewrites of exported graphs: an EfficientDet graph in the layout exported before (every anchor decoded
and every score's sigmoid taken in the decoder) rewritten to decode its candidates only, and to take the
sigmoid of its candidates only, gives every output bit for bit, and equals what the exporter writes now."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from detectors_testkit import make_efficientdet_checkpoint
from exporters_testkit import ExportedArtifact
from torch import Tensor, nn

from exporters.onnx.export import export_detection_graph
from exporters.onnx.graph import with_outputs
from exporters.onnx.graph_rewrites import decode_candidates_only, mask_scores_before_topk, sigmoid_after_topk
from exporters.onnx.ort_cpu import cpu_session
from exporters.onnx.wrappers import wrapper_for
from training.data.letterbox import letterbox_resize
from training.data.synthetic import render_sample
from training.detectors.efficientdet.export import EfficientDetDecoder
from training.detectors.efficientdet.postprocess import decode_effdet_boxes
from training.detectors.efficientdet.transforms import EFFICIENTDET_PAD_VALUE
from training.weights import load_checkpoint


class AllAnchorsDecoder(nn.Module):
    """The decoder as exported before: boxes for every anchor, no ``decode_candidates``, and sigmoid
    scores for every (anchor, class)."""

    def __init__(self, inner: EfficientDetDecoder) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *raw: Tensor) -> tuple[Tensor, Tensor]:
        codes, logits = self.inner(*raw)
        size = self.inner.image_size
        boxes = decode_effdet_boxes(codes, self.inner.anchors.unsqueeze(0), size) / float(size)
        return boxes, logits.sigmoid()


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx.ModelProto]:
    checkpoint = make_efficientdet_checkpoint(tmp_path_factory.mktemp("effdet") / "checkpoint.pt")
    wrapper = wrapper_for(load_checkpoint(checkpoint), "efficientdet-d0")
    settings = wrapper.default_settings
    current, _ = export_detection_graph(wrapper, settings)
    new_decoder = wrapper.decoder
    wrapper.decoder = lambda: AllAnchorsDecoder(new_decoder())  # type: ignore[method-assign]
    before, _ = export_detection_graph(wrapper, settings)
    return {"before": before, "current": current}


def images(seed: int, batch: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(batch, 128, 128, 3), dtype=np.uint8)


def scenes(seed: int, batch: int = 3) -> np.ndarray:
    """Synthetic scenes letterboxed to 128: the images the test checkpoint's heads were scaled on, so its
    class logits spread over a range where sigmoid scores do not tie (noise saturates them to 1.0)."""
    rng = np.random.default_rng(seed)
    return np.stack(
        [letterbox_resize(render_sample(rng)[0], 128, 128, EFFICIENTDET_PAD_VALUE)[0] for _ in range(batch)]
    )


def run(model: onnx.ModelProto, batch: np.ndarray, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    names = [out.name for out in model.graph.output] + list(extra)
    session = cpu_session(with_outputs(model, names) if extra else model)
    return dict(zip(names, session.run(names, {"images": batch}), strict=True))


def test_decode_candidates_only_keeps_every_output_bit_for_bit(graphs: dict[str, onnx.ModelProto]) -> None:
    before = graphs["before"]
    after = decode_candidates_only(before)
    exp = next(node for node in before.graph.node if node.op_type == "Exp")
    for seed in range(3):
        batch = images(seed)
        old, new = run(before, batch, (exp.output[0],)), run(after, batch, (exp.output[0],))
        assert int(old["num_detections"].sum()) > 0  # the comparison covers real detections
        for name in (out.name for out in before.graph.output):
            assert np.array_equal(old[name], new[name]), name
        # The decoding ran on the 3,000 candidates instead of all 3,069 anchors (128 px, five levels).
        used = {name for node in after.graph.node for name in node.input}
        assert all(init.name in used for init in after.graph.initializer)  # no table left behind
        assert old[exp.output[0]].shape == (3, 3069, 2) and new[exp.output[0]].shape == (3, 3000, 2)


def test_sigmoid_after_topk_keeps_the_outputs_but_the_order_of_ties(
    graphs: dict[str, onnx.ModelProto],
) -> None:
    """Scores and counts bit for bit; boxes and classes too wherever no two kept scores are equal. A
    random network saturates some images' sigmoid scores to 1.0: among such ties the TopK over logits
    keeps another order, and with it other boxes (the shipped artifacts showed no ties: 0 of 200 images
    changed, scripts/export/rewrite_artifact_graph.py)."""
    before = decode_candidates_only(graphs["before"])
    after = sigmoid_after_topk(before, 0.05)
    (sigmoid,) = [node for node in after.graph.node if node.name == "/postprocess/SigmoidAfterTopK"]
    untied = 0
    for seed in range(3):
        batch = scenes(seed)
        old, new = run(before, batch), run(after, batch, (sigmoid.output[0],))
        assert np.array_equal(new["num_detections"], old["num_detections"])
        assert np.array_equal(new["detection_scores"], old["detection_scores"])
        for i, scores in enumerate(old["detection_scores"]):
            if np.unique(scores).size == scores.size:  # no ties: the very same detections
                untied += 1
                for name in ("detection_boxes", "detection_classes"):
                    assert np.array_equal(new[name][i], old[name][i]), name
        # The sigmoid ran on the 3,000 candidates of each image, not on 3,069 anchors x 6 classes.
        assert new[sigmoid.output[0]].shape == (3, 3000)
    assert untied > 0  # the comparison covered images without ties
    assert not [node for node in after.graph.node if node.name == "/decoder/Sigmoid"]
    used = {name for node in after.graph.node for name in node.input}
    assert all(init.name in used for init in after.graph.initializer)


def test_rewritten_graph_equals_what_the_exporter_writes_now(graphs: dict[str, onnx.ModelProto]) -> None:
    after = sigmoid_after_topk(decode_candidates_only(graphs["before"]), 0.05)
    batch = images(7)
    current, rewritten = run(graphs["current"], batch), run(after, batch)
    for name, value in current.items():
        np.testing.assert_allclose(rewritten[name], value, rtol=0, atol=1e-6, err_msg=name)


def test_rewriting_twice_or_the_wrong_graph_is_refused(
    graphs: dict[str, onnx.ModelProto], exported: ExportedArtifact
) -> None:
    with pytest.raises(ValueError, match="no per-anchor box decoding"):
        decode_candidates_only(graphs["current"])
    with pytest.raises(ValueError, match="no per-anchor box decoding"):
        decode_candidates_only(decode_candidates_only(graphs["before"]))
    with pytest.raises(ValueError, match="already rewritten: scores are masked"):
        mask_scores_before_topk(graphs["before"], 0.05)
    with pytest.raises(ValueError, match="no Sigmoid in front of the masked scores"):
        sigmoid_after_topk(graphs["current"], 0.05)
    with pytest.raises(ValueError, match=r"not the score threshold 0\.3"):
        sigmoid_after_topk(graphs["before"], 0.3)
    with pytest.raises(ValueError, match="not masked at the threshold"):
        sigmoid_after_topk(unmask(graphs["before"]), 0.05)
    ssd = onnx.load(str(exported.model_path))
    with pytest.raises(ValueError, match="not a global pre-NMS top-k export"):
        mask_scores_before_topk(ssd, 0.05)


def test_masking_before_topk_keeps_the_outputs(graphs: dict[str, onnx.ModelProto]) -> None:
    unmasked = unmask(graphs["before"])
    masked = mask_scores_before_topk(unmasked, 0.05)
    batch = images(3)
    old, new = run(unmasked, batch), run(masked, batch)
    for name, value in old.items():
        assert np.array_equal(new[name], value), name


def unmask(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the TopK reading the scores before the exporter's mask (the layout exported before)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    producers = {out: node for node in model.graph.node for out in node.output}
    topk = next(node for node in model.graph.node if node.name == "/postprocess/TopK")
    where = producers[topk.input[0]]
    assert where.op_type == "Where"
    topk.input[0] = where.input[1]
    return model


def test_torch_decode_is_per_anchor() -> None:
    """The premise of the rewrite: decoding gathered rows equals gathering decoded rows."""
    anchors = torch.rand(50, 4) * 100 + 1
    codes = torch.randn(2, 50, 4)
    index = torch.randint(0, 50, (2, 20))
    decoded = decode_effdet_boxes(codes, anchors.unsqueeze(0), 128)
    gathered = decoded.gather(1, index.unsqueeze(2).expand(-1, -1, 4))
    late = decode_effdet_boxes(codes.gather(1, index.unsqueeze(2).expand(-1, -1, 4)), anchors[index], 128)
    assert torch.equal(gathered, late)

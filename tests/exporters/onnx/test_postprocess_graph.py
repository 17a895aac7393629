"""The export-friendly post-processing, in eager PyTorch, against training's post-processing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contract.manifest import OUTPUT_NAMES
from exporters.onnx.export import torch_to_onnx
from exporters.onnx.ort_cpu import cpu_session
from exporters.onnx.postprocess_graph import DetectionPostprocess, PostprocessSettings, non_max_suppression
from training.box_ops import decode_boxes, xywh_to_xyxy
from training.detectors.ssd300.default_boxes import default_boxes_xywh
from training.detectors.ssd300.loss import BOX_CODE_WEIGHTS
from training.detectors.ssd300.postprocess import postprocess


def _random_heads(batch: int, num_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    locs = torch.randn(batch, 4, 8732, generator=gen) * 0.5
    confs = torch.randn(batch, num_classes + 1, 8732, generator=gen) * 2.0
    return locs, confs


@pytest.mark.parametrize(
    "settings",
    [
        PostprocessSettings(),
        PostprocessSettings(score_threshold=0.3, iou_threshold=0.45, topk_per_class=50, max_detections=20),
    ],
)
def test_matches_training_postprocess(settings: PostprocessSettings) -> None:
    dboxes = default_boxes_xywh()
    locs, confs = _random_heads(batch=3, num_classes=4, seed=1)
    boxes = xywh_to_xyxy(decode_boxes(locs.transpose(1, 2), dboxes, BOX_CODE_WEIGHTS))
    scores = confs.softmax(dim=1)[:, 1:]
    num, det_boxes, det_scores, det_classes = DetectionPostprocess(settings, 4, 8732)(boxes, scores)
    reference = postprocess(locs, confs, dboxes, settings)
    for i, ref in enumerate(reference):
        n = int(num[i, 0])
        assert n == len(ref["scores"]) > 0
        # Same detections in the same order (random scores have no ties).
        torch.testing.assert_close(det_scores[i, :n], ref["scores"], rtol=0, atol=0)
        torch.testing.assert_close(det_boxes[i, :n], ref["boxes"], rtol=0, atol=0)
        assert det_classes[i, :n].tolist() == (ref["labels"] - 1).tolist()
        assert not det_scores[i, n:].any() and not det_boxes[i, n:].any() and not det_classes[i, n:].any()


def test_output_dtypes_and_padding_when_fewer_candidates_than_k() -> None:
    # 1 class x top-5 = 5 candidates < K = 10: the outputs are still padded to K.
    settings = PostprocessSettings(score_threshold=0.0, topk_per_class=5, max_detections=10)
    boxes = torch.rand(2, 30, 4) * 0.5
    boxes[..., 2:] += 0.5  # x2 > x1, y2 > y1
    scores = torch.rand(2, 1, 30)
    num, det_boxes, det_scores, det_classes = DetectionPostprocess(settings, 1, 30)(boxes, scores)
    assert (num.dtype, det_boxes.dtype, det_scores.dtype, det_classes.dtype) == (
        torch.int32,
        torch.float32,
        torch.float32,
        torch.int32,
    )
    assert (
        num.shape == (2, 1)
        and det_boxes.shape == (2, 10, 4)
        and det_scores.shape == det_classes.shape == (2, 10)
    )
    assert int(num.max()) <= 5
    assert not det_scores[:, 5:].any()


def test_nothing_above_threshold_gives_zero_detections() -> None:
    settings = PostprocessSettings(score_threshold=0.9)
    scores = torch.full((2, 3, 100), 0.1)
    num, det_boxes, det_scores, _ = DetectionPostprocess(settings, 3, 100)(torch.rand(2, 100, 4), scores)
    assert num.tolist() == [[0], [0]]
    assert not det_scores.any() and not det_boxes.any()


def test_nms_groups_are_independent_and_suppress_by_iou() -> None:
    box = torch.tensor([0.1, 0.1, 0.5, 0.5])
    shifted = torch.tensor([0.12, 0.1, 0.52, 0.5])  # IoU ~0.9 with box
    far = torch.tensor([0.6, 0.6, 0.9, 0.9])
    boxes = torch.stack([box, shifted, far]).expand(2, 3, 4).contiguous()  # the same boxes in 2 groups
    scores = torch.tensor([[[0.9, 0.8, 0.7]], [[0.5, 0.6, -1.0]]])  # group 1: box 2 is not a candidate
    selected = non_max_suppression(boxes, scores, max_per_group=10, iou_threshold=0.5, score_threshold=0.0)
    assert selected.tolist() == [[0, 0, 0], [0, 0, 2], [1, 0, 1]]


@pytest.mark.parametrize(
    ("field", "value"),
    [("score_threshold", 1.0), ("iou_threshold", -0.1), ("topk_per_class", 0), ("max_detections", 3840)],
)
def test_settings_reject_bad_values_naming_them(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        PostprocessSettings(**{field: value})


@pytest.mark.parametrize(
    ("num_classes", "settings"),
    [
        (4, PostprocessSettings(topk_per_class=50, max_detections=30)),
        (1, PostprocessSettings(0.0, 0.5, 5, 10)),
    ],
)
def test_exported_postprocessing_equals_eager_in_onnxruntime(
    num_classes: int, settings: PostprocessSettings
) -> None:
    """The post-processing alone through ONNX Runtime: dynamic batch, an image with no candidate at all,
    and (second case) fewer candidates than K, padded by the graph."""
    module = DetectionPostprocess(settings, num_classes, 500).eval()
    gen = torch.Generator().manual_seed(3)
    xy = torch.rand(2, 500, 2, generator=gen)
    example = (
        torch.cat([xy, xy + 0.2 * torch.rand(2, 500, 2, generator=gen)], dim=2),
        torch.rand(2, num_classes, 500, generator=gen),
    )
    model = torch_to_onnx(module, example, ["boxes", "scores"], list(OUTPUT_NAMES), opset=17)
    session = cpu_session(model)
    xy = torch.rand(3, 500, 2, generator=gen)
    boxes = torch.cat([xy, xy + 0.2 * torch.rand(3, 500, 2, generator=gen)], dim=2)
    scores = torch.rand(3, num_classes, 500, generator=gen)
    scores[1] = -1.0  # no candidate in image 1
    got = session.run(list(OUTPUT_NAMES), {"boxes": boxes.numpy(), "scores": scores.numpy()})
    expected = module(boxes, scores)
    assert got[0][1, 0] == 0
    for name, out, ref in zip(OUTPUT_NAMES, got, expected, strict=True):
        assert out.dtype == ref.numpy().dtype and out.shape == tuple(ref.shape), name
        np.testing.assert_array_equal(out, ref.numpy(), err_msg=name)


@pytest.mark.parametrize("pre_nms_topk", [None, 40])
def test_decoding_the_candidates_only_gives_the_same_detections(pre_nms_topk: int | None) -> None:
    """``decode``: per-anchor box codes in, decoded after the pre-NMS selection, in both candidate modes
    (per class, and EfficientDet's global top-k): the same detections as boxes decoded for every anchor."""
    settings = PostprocessSettings(
        score_threshold=0.1, topk_per_class=30, max_detections=20, pre_nms_topk=pre_nms_topk
    )
    gen = torch.Generator().manual_seed(5)
    anchors = torch.cat(
        [torch.rand(300, 2, generator=gen), 0.05 + 0.2 * torch.rand(300, 2, generator=gen)], 1
    )
    codes = 0.3 * torch.randn(2, 300, 4, generator=gen)
    scores = torch.rand(2, 3, 300, generator=gen)

    def decode(candidate_codes: torch.Tensor, anchor_index: torch.Tensor) -> torch.Tensor:
        return xywh_to_xyxy(decode_boxes(candidate_codes, anchors[anchor_index], BOX_CODE_WEIGHTS))

    module = DetectionPostprocess(settings, 3, 300)
    every_anchor = module(xywh_to_xyxy(decode_boxes(codes, anchors, BOX_CODE_WEIGHTS)), scores)
    candidates_only = module(codes, scores, decode=decode)
    assert int(every_anchor[0].sum()) > 10
    for name, late, early in zip(OUTPUT_NAMES, candidates_only, every_anchor, strict=True):
        torch.testing.assert_close(late, early, rtol=0, atol=1e-6, msg=name)
    with pytest.raises(ValueError, match="one box code per anchor"):
        module(codes.unsqueeze(1).expand(-1, 3, -1, -1), scores, decode=decode)


def test_logits_take_the_sigmoid_of_the_candidates_only() -> None:
    """``logits=True`` (EfficientDet's global top-k): the TopK over the logits, masked at the threshold's
    logit, then the sigmoid of the candidates gives the detections of the TopK over sigmoid scores; it is
    refused for the per-class TopK, which has no such form."""
    settings = PostprocessSettings(score_threshold=0.3, topk_per_class=30, max_detections=20, pre_nms_topk=40)
    gen = torch.Generator().manual_seed(6)
    xy = torch.rand(2, 300, 2, generator=gen)
    boxes = torch.cat([xy, xy + 0.1 + 0.2 * torch.rand(2, 300, 2, generator=gen)], dim=2)
    logits = 2.0 * torch.randn(2, 3, 300, generator=gen)
    from_scores = DetectionPostprocess(settings, 3, 300)(boxes, logits.sigmoid())
    from_logits = DetectionPostprocess(settings, 3, 300, logits=True)(boxes, logits)
    assert int(from_scores[0].sum()) > 10
    for name, got, expected in zip(OUTPUT_NAMES, from_logits, from_scores, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=name)
    with pytest.raises(ValueError, match="logits need the global pre-NMS TopK"):
        DetectionPostprocess(PostprocessSettings(), 3, 300, logits=True)

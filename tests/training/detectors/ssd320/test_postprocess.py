"""SSD320 post-processing: decoding against the anchors, sigmoid scores, per-class NMS at IoU 0.6."""

from dataclasses import replace

import torch

from training.box_ops import encode_boxes, xyxy_to_xywh
from training.detectors.ssd320.loss import BOX_CODE_WEIGHTS
from training.detectors.ssd320.postprocess import EVAL_SETTINGS, decode_predictions, postprocess
from training.postprocess import PostprocessSettings

# Four anchors: 1 overlaps 0 with IoU 0.78 (> 0.6), 2 overlaps 0 with IoU 0.54 (< 0.6), 3 is apart.
ANCHORS_XYXY = torch.tensor(
    [[0.1, 0.1, 0.5, 0.5], [0.15, 0.1, 0.55, 0.5], [0.22, 0.1, 0.62, 0.5], [0.6, 0.6, 0.9, 0.9]]
)
ANCHORS = xyxy_to_xywh(ANCHORS_XYXY)


def _logit(p: float) -> float:
    return float(torch.logit(torch.tensor(p)))


def test_decoding_inverts_the_box_coder_and_clips_to_the_image() -> None:
    target = torch.tensor(
        [[[0.3, 0.35, 0.2, 0.3], [0.5, 0.5, 1.4, 0.2], [0.3, 0.3, 0.2, 0.2], [0.7, 0.7, 0.1, 0.1]]]
    )
    codes = encode_boxes(target, ANCHORS, BOX_CODE_WEIGHTS)
    boxes, scores = decode_predictions(codes, torch.zeros(1, 4, 2), ANCHORS)
    assert torch.allclose(boxes[0, 0], torch.tensor([0.2, 0.2, 0.4, 0.5]), atol=1e-6)
    assert torch.allclose(boxes[0, 1], torch.tensor([0.0, 0.4, 1.0, 0.6]), atol=1e-6)  # clipped at 0 and 1
    assert torch.allclose(scores, torch.full((1, 4, 2), 0.5))


def test_per_class_nms_at_iou_06_sorted_with_labels_from_one() -> None:
    logits = torch.full((1, 4, 2), -20.0)
    logits[0, 0, 0], logits[0, 1, 0], logits[0, 2, 0] = _logit(0.9), _logit(0.8), _logit(0.7)
    logits[0, 1, 1] = _logit(0.85)  # class 2 at anchor 1: another class, never suppressed by class 1
    logits[0, 3, 1] = _logit(0.6)
    (result,) = postprocess(
        torch.zeros(1, 4, 4), logits, ANCHORS, replace(EVAL_SETTINGS, score_threshold=0.01)
    )
    assert result["labels"].tolist() == [1, 2, 1, 2]
    assert torch.allclose(result["scores"], torch.tensor([0.9, 0.85, 0.7, 0.6]))
    assert torch.allclose(result["boxes"][2], ANCHORS_XYXY[2])  # anchor 1 of class 1 suppressed, 2 kept


def test_topk_per_class_and_max_detections_bound_the_output() -> None:
    logits = torch.tensor(
        [
            [
                [_logit(0.9), _logit(0.5)],
                [_logit(0.2), _logit(0.4)],
                [_logit(0.3), _logit(0.6)],
                [_logit(0.8), _logit(0.7)],
            ]
        ]
    )
    cfg = PostprocessSettings(score_threshold=1e-8, iou_threshold=1.0, topk_per_class=2, max_detections=3)
    (result,) = postprocess(torch.zeros(1, 4, 4), logits, ANCHORS, cfg)
    # class 1 keeps anchors 0, 3 (0.9, 0.8); class 2 keeps anchors 3, 2 (0.7, 0.6); the best 3 of those.
    assert torch.allclose(result["scores"], torch.tensor([0.9, 0.8, 0.7]))
    assert result["labels"].tolist() == [1, 1, 2]

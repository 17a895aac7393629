import dataclasses

import torch

from training.box_ops import encode_boxes
from training.detectors.ssd300.default_boxes import default_boxes_xywh
from training.detectors.ssd300.loss import BOX_CODE_WEIGHTS
from training.detectors.ssd300.postprocess import EVAL_SETTINGS, postprocess


def test_recovers_encoded_objects_and_suppresses_duplicates() -> None:
    dboxes = default_boxes_xywh()
    num_classes = 3
    target = dboxes.clone()
    confs = torch.full((1, num_classes + 1, 8732), -10.0)
    confs[0, 0] = 10.0  # background everywhere
    # Two default boxes predict the same object of class 2 (duplicates), one predicts a class-1 object.
    obj_a = torch.tensor([0.3, 0.3, 0.2, 0.2])
    obj_b = torch.tensor([0.7, 0.7, 0.3, 0.3])
    for idx, obj, cls in [(100, obj_a, 2), (101, obj_a, 2), (6000, obj_b, 1)]:
        target[idx] = obj
        confs[0, :, idx] = -10.0
        confs[0, cls, idx] = 10.0
    locs = encode_boxes(target, dboxes, BOX_CODE_WEIGHTS).T.unsqueeze(0)
    (result,) = postprocess(locs, confs, dboxes, EVAL_SETTINGS)
    assert result["labels"].tolist() == [2, 1] or result["labels"].tolist() == [1, 2]
    assert len(result["boxes"]) == 2
    expected = {2: torch.tensor([0.2, 0.2, 0.4, 0.4]), 1: torch.tensor([0.55, 0.55, 0.85, 0.85])}
    for box, label in zip(result["boxes"], result["labels"].tolist(), strict=True):
        assert torch.allclose(box, expected[label], atol=1e-5)
    assert bool((result["scores"][:-1] >= result["scores"][1:]).all())


def test_caps_detections_and_drops_low_scores() -> None:
    dboxes = default_boxes_xywh()
    torch.manual_seed(0)
    locs = torch.randn(2, 4, 8732) * 0.1
    confs = torch.randn(2, 6, 8732)
    results = postprocess(locs, confs, dboxes, dataclasses.replace(EVAL_SETTINGS, max_detections=50))
    for r in results:
        assert len(r["boxes"]) <= 50
        assert bool((r["scores"] > 0.05).all())
        assert int(r["labels"].min()) >= 1


def test_nms_stays_exact_next_to_a_huge_box_of_another_class() -> None:
    # A young model decodes boxes 1e7 wide; batched_nms's per-class coordinate offset would round the
    # small class-2 boxes below into one point and keep both duplicates.
    dboxes = default_boxes_xywh()
    target = dboxes.clone()
    confs = torch.full((1, 4, 8732), -10.0)
    confs[0, 0] = 10.0
    obj = torch.tensor([0.3, 0.3, 0.02, 0.02])
    for idx, box, cls in [
        (100, obj, 2),
        (101, obj + 0.001, 2),
        (6000, torch.tensor([0.5, 0.5, 1e7, 1.0]), 1),
    ]:
        target[idx] = box
        confs[0, :, idx] = -10.0
        confs[0, cls, idx] = 10.0 - 0.1 * (idx == 101)
    locs = encode_boxes(target, dboxes, BOX_CODE_WEIGHTS).T.unsqueeze(0)
    (result,) = postprocess(locs, confs, dboxes, EVAL_SETTINGS)
    assert sorted(result["labels"].tolist()) == [1, 2]

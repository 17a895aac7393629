import torch

from training.box_ops import (
    decode_boxes,
    encode_boxes,
    ltwh_to_xyxy,
    match_anchors,
    xywh_to_xyxy,
    xyxy_to_ltwh,
    xyxy_to_xywh,
)

WEIGHTS = (10.0, 10.0, 5.0, 5.0)


def test_format_round_trips() -> None:
    xyxy = torch.tensor([[10.0, 20.0, 50.0, 80.0], [0.0, 0.0, 1.0, 2.0]])
    assert torch.allclose(xyxy_to_xywh(xyxy), torch.tensor([[30.0, 50.0, 40.0, 60.0], [0.5, 1.0, 1.0, 2.0]]))
    assert torch.allclose(xywh_to_xyxy(xyxy_to_xywh(xyxy)), xyxy)
    assert torch.allclose(xyxy_to_ltwh(xyxy), torch.tensor([[10.0, 20.0, 40.0, 60.0], [0.0, 0.0, 1.0, 2.0]]))
    assert torch.allclose(ltwh_to_xyxy(xyxy_to_ltwh(xyxy)), xyxy)


def test_encode_decode_round_trip() -> None:
    gen = torch.Generator().manual_seed(0)
    anchors = torch.cat([torch.rand(100, 2, generator=gen), 0.05 + torch.rand(100, 2, generator=gen)], 1)
    boxes = torch.cat([torch.rand(100, 2, generator=gen), 0.05 + torch.rand(100, 2, generator=gen)], 1)
    codes = encode_boxes(boxes, anchors, WEIGHTS)
    assert torch.allclose(decode_boxes(codes, anchors, WEIGHTS), boxes, atol=1e-5)


def test_encode_matches_ssd_formula() -> None:
    anchor = torch.tensor([[0.5, 0.5, 0.2, 0.4]])
    box = torch.tensor([[0.6, 0.3, 0.4, 0.2]])
    expected = torch.tensor(
        [
            [
                10 * 0.1 / 0.2,
                10 * -0.2 / 0.4,
                5 * torch.log(torch.tensor(2.0)),
                5 * torch.log(torch.tensor(0.5)),
            ]
        ]
    )
    assert torch.allclose(encode_boxes(box, anchor, WEIGHTS), expected)


def test_match_forces_every_ground_truth_onto_an_anchor() -> None:
    anchors = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.0, 0.5, 0.5, 1.0]])
    # The first box overlaps anchor 0 by < 0.5 IoU, so only the force-match gives it an anchor.
    gt = torch.tensor([[0.0, 0.0, 0.3, 0.3], [0.5, 0.5, 1.0, 1.0]])
    matches = match_anchors(gt, anchors, 0.5)
    assert matches.tolist() == [0, 1, -1]


def test_match_threshold_and_empty() -> None:
    anchors = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.9, 1.0], [0.0, 0.0, 0.1, 0.1]])
    gt = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    assert match_anchors(gt, anchors, 0.5).tolist() == [0, 0, -1]
    assert match_anchors(torch.zeros(0, 4), anchors).tolist() == [-1, -1, -1]

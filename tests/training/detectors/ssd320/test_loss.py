"""SSD320 loss: focal term as torchvision's ``sigmoid_focal_loss`` and the written formula, smooth L1 on
matched anchors, both normalized by the batch's matches (localization also by the code size 4)."""

import math

import torch
from torchvision.ops import sigmoid_focal_loss

from training.box_ops import encode_boxes
from training.detectors.ssd320.loss import BOX_CODE_WEIGHTS, FocalLoss

ANCHORS = torch.tensor(
    [[0.25, 0.25, 0.5, 0.5], [0.75, 0.25, 0.5, 0.5], [0.25, 0.75, 0.5, 0.5], [0.5, 0.5, 0.2, 0.4]]
)


def _focal(logit: float, target: float, alpha: float = 0.25, gamma: float = 2.0) -> float:
    """The focal loss of one logit, written out: -alpha_t (1 - p_t)^gamma log(p_t)."""
    p = 1.0 / (1.0 + math.exp(-logit))
    p_t = p if target == 1.0 else 1.0 - p
    alpha_t = alpha if target == 1.0 else 1.0 - alpha
    return -alpha_t * (1.0 - p_t) ** gamma * math.log(p_t)


def _smooth_l1(x: float) -> float:
    return 0.5 * x * x if abs(x) < 1.0 else abs(x) - 0.5


def test_small_case_equals_the_formula_and_torchvision() -> None:
    torch.manual_seed(0)
    n, a, c = 2, 4, 3
    logits = torch.randn(n, a, c) * 2
    codes = torch.randn(n, a, 4) * 0.5
    labels = torch.tensor([[0, 2, 0, 1], [3, 0, 0, 0]])  # 3 matches in the batch
    gt = ANCHORS.expand(n, a, 4).clone()
    gt[0, 1] = torch.tensor([0.7, 0.3, 0.4, 0.55])
    gt[0, 3] = torch.tensor([0.52, 0.45, 0.25, 0.3])
    gt[1, 0] = torch.tensor([0.2, 0.3, 0.6, 0.45])

    loss = FocalLoss(ANCHORS)(codes, logits, gt, labels)

    cls_sum = sum(
        _focal(float(logits[i, j, k]), 1.0 if labels[i, j] == k + 1 else 0.0)
        for i in range(n)
        for j in range(a)
        for k in range(c)
    )
    one_hot = torch.nn.functional.one_hot(labels, c + 1)[..., 1:].float()
    torchvision_sum = float(sigmoid_focal_loss(logits, one_hot, alpha=0.25, gamma=2.0, reduction="sum"))
    assert math.isclose(cls_sum, torchvision_sum, rel_tol=1e-5)

    box_sum = 0.0
    for i, j in [(0, 1), (0, 3), (1, 0)]:
        (cx, cy, w, h), (acx, acy, aw, ah) = gt[i, j].tolist(), ANCHORS[j].tolist()
        target = [10 * (cx - acx) / aw, 10 * (cy - acy) / ah, 5 * math.log(w / aw), 5 * math.log(h / ah)]
        box_sum += sum(_smooth_l1(float(codes[i, j, t]) - target[t]) for t in range(4))
    expected = (cls_sum + box_sum / 4) / 3
    assert math.isclose(float(loss), expected, rel_tol=1e-5), (float(loss), expected)


def test_perfect_predictions_cost_almost_nothing_and_no_matches_normalize_by_one() -> None:
    n, a, c = 1, 4, 2
    labels = torch.tensor([[1, 0, 2, 0]])
    gt = ANCHORS.expand(n, a, 4).clone()
    gt[0, 0] = torch.tensor([0.3, 0.2, 0.4, 0.6])
    codes = encode_boxes(gt, ANCHORS, BOX_CODE_WEIGHTS)
    logits = (torch.nn.functional.one_hot(labels, c + 1)[..., 1:].float() * 2 - 1) * 30
    criterion = FocalLoss(ANCHORS)
    assert float(criterion(codes, logits, gt, labels)) < 1e-6

    # No object at all: the classification sum is divided by 1, not by 0.
    empty = torch.zeros(n, a, dtype=torch.int64)
    logits = torch.zeros(n, a, c)
    expected = n * a * c * _focal(0.0, 0.0)
    assert math.isclose(
        float(criterion(codes, logits, ANCHORS.expand(n, a, 4), empty)), expected, rel_tol=1e-6
    )

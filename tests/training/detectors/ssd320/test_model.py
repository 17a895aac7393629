"""SSD320 model: output contract, prediction order = anchor order, weight sharing, frozen BatchNorm."""

import pytest
import torch
from torch import nn

from training.detectors.ssd320.anchors import AnchorConfig
from training.detectors.ssd320.model import SSD320


@pytest.fixture(scope="module")
def model() -> SSD320:
    torch.manual_seed(0)
    return SSD320(num_classes=3, backbone="resnet18", image_size=96).eval()


def test_outputs_one_row_per_anchor(model: SSD320) -> None:
    box_regression, cls_logits = model(torch.randn(2, 3, 96, 96))
    cfg = AnchorConfig(image_size=96)
    assert cfg.feature_sizes == (12, 6, 3, 2, 1)
    assert box_regression.shape == (2, cfg.num_anchors, 4) and cls_logits.shape == (2, cfg.num_anchors, 3)


def test_prediction_index_is_level_row_column_anchor(model: SSD320) -> None:
    """Row i of the outputs is the predictor's output at the location and anchor of anchor i."""
    images = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        features = model.backbone(images)
        box_regression, cls_logits = model(images)
        level, row, col, anchor = 1, 4, 2, 5  # P4 (6x6)
        box_map = model.head.box_predictor(model.head.box_tower(features[level], level))
        cls_map = model.head.class_predictor(model.head.class_tower(features[level], level))
    cfg = AnchorConfig(image_size=96)
    index = 12 * 12 * 6 + (row * 6 + col) * 6 + anchor
    assert torch.allclose(box_regression[0, index], box_map[0, anchor * 4 : anchor * 4 + 4, row, col])
    assert torch.allclose(cls_logits[0, index], cls_map[0, anchor * 3 : anchor * 3 + 3, row, col])
    assert index < cfg.num_anchors


def test_convs_are_shared_across_levels_and_batchnorms_are_not(model: SSD320) -> None:
    for tower in (model.head.box_tower, model.head.class_tower):
        assert len(tower.convs) == 4 and all(conv.bias is None for conv in tower.convs)
        assert len(tower.norms) == 5 and all(len(level) == 4 for level in tower.norms)
        assert len({id(bn) for level in tower.norms for bn in level}) == 20
        assert all(bn.eps == 1e-3 for level in tower.norms for bn in level)
    assert torch.allclose(model.head.class_predictor.bias, torch.full((6 * 3,), -4.6))
    assert torch.count_nonzero(model.head.box_predictor.bias) == 0


def test_freeze_bn_keeps_batchnorm_statistics_in_training() -> None:
    torch.manual_seed(0)
    frozen = SSD320(num_classes=2, backbone="resnet18", image_size=64, freeze_bn=True).train()
    norms = [m for m in frozen.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and not any(m.training for m in norms) and frozen.head.box_predictor.training
    before = [m.running_mean.clone() for m in norms]
    box_regression, cls_logits = frozen(torch.randn(2, 3, 64, 64))
    (box_regression.sum() + cls_logits.sum()).backward()
    assert all(torch.equal(b, m.running_mean) for b, m in zip(before, norms, strict=True))
    assert all(m.weight.grad is not None for m in norms[-3:])  # scale and shift still learn

    trained = SSD320(num_classes=2, backbone="resnet18", image_size=64).train()
    assert all(m.training for m in trained.modules() if isinstance(m, nn.BatchNorm2d))


def test_wrong_input_size_names_the_layout(model: SSD320) -> None:
    with pytest.raises(ValueError, match="image_size 96"):
        model(torch.randn(1, 3, 100, 96))
    with pytest.raises(ValueError, match="num_classes"):
        SSD320(num_classes=0)

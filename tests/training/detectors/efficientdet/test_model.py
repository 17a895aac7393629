"""EfficientDet-D0's tensor contract, anchors that follow the input size, and backbone weights files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.detectors.efficientdet.effdet_compat import EfficientDet, get_efficientdet_config
from training.detectors.efficientdet.model import EfficientDetD0, anchor_boxes, load_backbone_weights
from training.detectors.registry import build_model


def test_output_contract_and_anchor_order_follow_the_input_size() -> None:
    model = build_model("efficientdet-d0", num_classes=3, backbone="efficientnet_b0", image_size=128).eval()
    assert isinstance(model, EfficientDetD0)
    with torch.no_grad():
        class_outputs, box_outputs = model(torch.randn(2, 3, 128, 128))
    sides = [16, 8, 4, 2, 1]  # strides 8 .. 128
    assert [tuple(c.shape) for c in class_outputs] == [(2, 9 * 3, s, s) for s in sides]
    assert [tuple(b.shape) for b in box_outputs] == [(2, 9 * 4, s, s) for s in sides]
    anchors = anchor_boxes(model)
    assert anchors.shape == (9 * sum(s * s for s in sides), 4)
    # y1 x1 y2 x2 pixels; the first anchor is P3's top-left cell, scale 4 x stride 8, aspect 1:1.
    torch.testing.assert_close(anchors[0], torch.tensor([4.0 - 16, 4.0 - 16, 4.0 + 16, 4.0 + 16]))
    # 512 gives effdet's published count.
    assert anchor_boxes(EfficientDetD0(num_classes=1, backbone="efficientnet_b0")).shape[0] == 49104


def test_never_downloads_and_matches_effdet_parameter_counts() -> None:
    """effdet's default would fetch ImageNet weights; ours builds offline with the published sizes."""
    tf_variant = EfficientDetD0(num_classes=90, backbone="tf_efficientnet_b0")
    assert sum(p.numel() for p in tf_variant.parameters()) == 3_880_067
    assert len(tf_variant.state_dict()) == 784
    assert sum(p.numel() for p in EfficientDetD0(90, "efficientnet_b0").parameters()) == 3_877_763


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"image_size": 320}, "multiple of 128"),
        ({"backbone": "resnet50"}, "unknown EfficientDet-D0 backbone 'resnet50'"),
        ({"num_classes": 0}, "num_classes must be >= 1"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EfficientDetD0(**{"num_classes": 2, "image_size": 128, **kwargs})  # type: ignore[arg-type]


def test_wrong_input_shape_is_named() -> None:
    model = EfficientDetD0(num_classes=2, backbone="efficientnet_b0", image_size=128)
    with pytest.raises(ValueError, match=r"images must be \[N, 3, 128, 128\], got \(1, 3, 64, 64\)"):
        model(torch.zeros(1, 3, 64, 64))


def test_backbone_weights_file_loads_and_a_wrong_one_is_refused(tmp_path: Path) -> None:
    import timm

    imagenet = timm.create_model("efficientnet_b0", pretrained=False).state_dict()  # classifier included
    torch.save(imagenet, tmp_path / "efficientnet_b0.pth")
    model = EfficientDetD0(2, "efficientnet_b0", 128, backbone_weights=tmp_path / "efficientnet_b0.pth")
    assert torch.equal(model.backbone.conv_stem.weight, imagenet["conv_stem.weight"])
    assert torch.equal(model.backbone.blocks[6][0].bn3.running_var, imagenet["blocks.6.0.bn3.running_var"])

    from safetensors.torch import save_file

    save_file({"conv_stem.weight": imagenet["conv_stem.weight"]}, str(tmp_path / "partial.safetensors"))
    with pytest.raises(ValueError, match=r"lacks \d+ backbone tensors"):
        load_backbone_weights(model.backbone, tmp_path / "partial.safetensors")
    with pytest.raises(FileNotFoundError, match="backbone weights not found"):
        load_backbone_weights(model.backbone, tmp_path / "missing.pth")


def test_model_is_effdets_efficientdet() -> None:
    """Same class and config as effdet's own, so its weights, anchors and loss apply unchanged."""
    model = EfficientDetD0(num_classes=90, backbone="tf_efficientnet_b0")
    assert isinstance(model, EfficientDet)
    reference = get_efficientdet_config("tf_efficientdet_d0")
    assert {k: model.config[k] for k in reference if k != "backbone_args"} == {
        k: reference[k] for k in reference if k != "backbone_args"
    }

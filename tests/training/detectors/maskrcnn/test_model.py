"""Mask R-CNN builders: torchvision's modules, project arguments, torchvision's published weight layouts."""

from pathlib import Path

import pytest
import torch
from torchvision.models.detection import maskrcnn_resnet50_fpn_v2 as tv_maskrcnn_v2
from torchvision.models.detection.transform import GeneralizedRCNNTransform
from torchvision.ops.misc import FrozenBatchNorm2d

from training.detectors.maskrcnn.model import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    detect,
    maskrcnn_resnet50_fpn,
    maskrcnn_resnet50_fpn_v2,
    normalize,
)
from training.detectors.maskrcnn.weights import coco91_categories
from training.train import load_initial_weights
from training.weights import build_checkpoint_model, load_checkpoint


def _published_v1_state() -> dict[str, torch.Tensor]:
    """torchvision's COCO v1 file layout: 91 classes, FrozenBatchNorm2d buffers (no num_batches_tracked)."""
    model = maskrcnn_resnet50_fpn(num_classes=90, norm="frozen")
    state = model.state_dict()
    assert not any(k.endswith("num_batches_tracked") for k in state)
    return state


def test_torchvision_v1_file_loads_as_a_checkpoint_strictly(tmp_path: Path) -> None:
    path = tmp_path / "maskrcnn_resnet50_fpn_coco.pth"
    state = _published_v1_state()
    torch.save({f"module.{k}": v for k, v in state.items()}, path)  # DDP-saved keys load too
    ckpt = load_checkpoint(path)
    assert ckpt.model_name == "maskrcnn_resnet50_fpn" and ckpt.source == "torchvision-maskrcnn"
    assert ckpt.model_args == {
        "num_classes": 90,
        "backbone": "resnet50",
        "image_size": 1088,
        "norm": "frozen",
        "norm_eps": 0.0,
    }
    assert ckpt.categories[0] == {"id": 1, "name": "person"}
    assert ckpt.categories[11] == {"id": 12, "name": "N/A"}  # an id COCO 2017 does not use
    model = build_checkpoint_model(ckpt)  # strict
    assert isinstance(model.backbone.body.bn1, FrozenBatchNorm2d) and model.backbone.body.bn1.eps == 0.0
    torch.testing.assert_close(
        model.roi_heads.mask_predictor.mask_fcn_logits.weight,
        state["roi_heads.mask_predictor.mask_fcn_logits.weight"],
    )


def test_torchvision_v2_file_and_weights_flag_load_strictly(tmp_path: Path) -> None:
    reference = tv_maskrcnn_v2(weights=None, weights_backbone=None, num_classes=7)
    path = tmp_path / "v2.pth"
    torch.save({"model": reference.state_dict(), "epoch": 25}, path)  # torchvision's reference checkpoint
    ckpt = load_checkpoint(path)
    assert ckpt.model_name == "maskrcnn_resnet50_fpn_v2"
    assert ckpt.model_args["num_classes"] == 6
    assert ckpt.categories[0] == {"id": 1, "name": "class_1"}
    model = maskrcnn_resnet50_fpn_v2(num_classes=6)
    load_initial_weights(model, "maskrcnn_resnet50_fpn_v2", str(path))
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    with pytest.raises(ValueError, match="holds a maskrcnn_resnet50_fpn_v2 model"):
        load_initial_weights(model, "maskrcnn_resnet50_fpn", str(path))
    with pytest.raises(ValueError, match="does not fit"):
        load_initial_weights(maskrcnn_resnet50_fpn_v2(num_classes=5), "maskrcnn_resnet50_fpn_v2", str(path))


def test_builder_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        maskrcnn_resnet50_fpn(num_classes=3, backbone="resnet18", image_size=100)
    with pytest.raises(ValueError, match="unknown Mask R-CNN options"):
        maskrcnn_resnet50_fpn(num_classes=3, backbone="resnet18", rpn_nms=0.5)
    with pytest.raises(ValueError, match="resnet50 backbone"):
        maskrcnn_resnet50_fpn_v2(num_classes=3, backbone="resnet18")
    with pytest.raises(ValueError, match="unknown backbone"):
        maskrcnn_resnet50_fpn(num_classes=3, backbone="vgg16")
    model = maskrcnn_resnet50_fpn(
        num_classes=3, backbone="resnet18", image_size=128, box_detections_per_img=7
    )
    assert model.roi_heads.box_predictor.cls_score.out_features == 4  # background + 3
    assert model.roi_heads.detections_per_img == 7
    assert model.transform.min_size == (128,) and model.transform.max_size == 128
    assert len(coco91_categories(90)) == 90


def test_box_representation_size_narrows_the_box_head_only() -> None:
    wide = maskrcnn_resnet50_fpn(num_classes=3, backbone="resnet18", image_size=128)
    narrow = maskrcnn_resnet50_fpn(
        num_classes=3, backbone="resnet18", image_size=128, box_representation_size=256
    )
    assert wide.roi_heads.box_head.fc6.out_features == 1024  # torchvision's default
    assert (narrow.roi_heads.box_head.fc6.in_features, narrow.roi_heads.box_head.fc6.out_features) == (
        256 * 7 * 7,
        256,
    )
    assert narrow.roi_heads.box_predictor.cls_score.out_features == 4  # background + 3
    assert narrow.roi_heads.mask_predictor.mask_fcn_logits.out_channels == 4
    wide_state, narrow_state = wide.state_dict(), narrow.state_dict()
    assert wide_state.keys() == narrow_state.keys()  # same layout: checkpoints and exporters read both
    changed = {k for k in wide_state if wide_state[k].shape != narrow_state[k].shape}
    assert changed and all(k.startswith(("roi_heads.box_head.", "roi_heads.box_predictor.")) for k in changed)
    narrow.eval()
    with torch.no_grad():
        (out,) = detect(narrow, normalize(torch.randint(0, 256, (1, 128, 128, 3), dtype=torch.uint8)))
    assert set(out) >= {"boxes", "labels", "scores", "masks"}
    with pytest.raises(ValueError, match="box_representation_size"):
        maskrcnn_resnet50_fpn(num_classes=3, backbone="resnet18", box_representation_size=0)


def test_normalize_matches_torchvisions_transform_and_detect_contract() -> None:
    images = torch.randint(0, 256, (2, 64, 96, 3), dtype=torch.uint8)
    transform = GeneralizedRCNNTransform(64, 96, list(IMAGENET_MEAN), list(IMAGENET_STD))
    expected = torch.stack([transform.normalize(img.permute(2, 0, 1).float() / 255) for img in images])
    torch.testing.assert_close(normalize(images), expected, atol=1e-5, rtol=1e-5)
    model = maskrcnn_resnet50_fpn(num_classes=3, backbone="resnet18", image_size=64).eval()
    (result,) = detect(model, normalize(images[:1, :, :64]))
    assert set(result) == {"boxes", "labels", "scores", "masks"}
    assert result["masks"].shape[1:] == (1, 28, 28)
    with pytest.raises(ValueError, match="eval mode"):
        detect(model.train(), normalize(images[:1, :, :64]))

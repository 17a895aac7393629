import pytest
import torch

from training.detectors.ssd300.model import SSD300


@pytest.mark.parametrize(("backbone", "c0"), [("resnet18", 256), ("resnet34", 256), ("resnet50", 1024)])
def test_output_shapes(backbone: str, c0: int) -> None:
    model = SSD300(num_classes=3, backbone=backbone).eval()
    assert model.loc[0].in_channels == c0
    with torch.no_grad():
        locs, confs = model(torch.zeros(2, 3, 300, 300))
    assert locs.shape == (2, 4, 8732)
    assert confs.shape == (2, 4, 8732)


def test_backbone_keeps_38x38() -> None:
    model = SSD300(num_classes=1, backbone="resnet18").eval()
    with torch.no_grad():
        assert model.feature_extractor(torch.zeros(1, 3, 300, 300)).shape == (1, 256, 38, 38)


def test_bad_input_names_the_shape() -> None:
    model = SSD300(num_classes=1, backbone="resnet18")
    with pytest.raises(ValueError, match=r"\[N, 3, H, W\], got \(3, 300, 300\)"):
        model(torch.zeros(3, 300, 300))
    with pytest.raises(ValueError, match="unknown backbone 'vgg16'"):
        SSD300(backbone="vgg16")

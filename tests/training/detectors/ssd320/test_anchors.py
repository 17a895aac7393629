"""SSD320 anchors: the count and coordinates of TF's configuration, and agreement with torchvision's
``AnchorGenerator`` up to its documented conventions."""

import math

import pytest
import torch
from torchvision.models.detection.anchor_utils import AnchorGenerator

from training.detectors.ssd320.anchors import AnchorConfig, generate_anchors_xywh, generate_anchors_xyxy


def test_count_at_320_is_12804() -> None:
    cfg = AnchorConfig()
    assert cfg.feature_sizes == (40, 20, 10, 5, 3)
    assert cfg.anchors_per_location == 6
    assert cfg.num_anchors == 12_804
    assert generate_anchors_xyxy(cfg).shape == (12_804, 4)


def _anchor(cfg: AnchorConfig, level: int, row: int, col: int, index: int) -> torch.Tensor:
    offset = 0
    for lv, size in zip(cfg.levels, cfg.feature_sizes, strict=True):
        if lv == level:
            return generate_anchors_xyxy(cfg)[offset + (row * size + col) * cfg.anchors_per_location + index]
        offset += size * size * cfg.anchors_per_location
    raise AssertionError(level)


def test_coordinates_follow_the_configuration() -> None:
    cfg = AnchorConfig()
    s = 320.0
    # P3, first location, ratio 1 scale 1: base 4 x 8 = 32 px centred at (4, 4).
    assert torch.allclose(_anchor(cfg, 3, 0, 0, 0), torch.tensor([-12, -12, 20, 20]) / s, atol=1e-6)
    # P3, second scale of the octave: 32 * sqrt(2) = 45.25 px.
    half = 16 * math.sqrt(2)
    assert torch.allclose(
        _anchor(cfg, 3, 0, 0, 1), torch.tensor([4 - half, 4 - half, 4 + half, 4 + half]) / s
    )
    # P4, row 2, column 5, ratio 2 (width / height), scale 1: 64 * sqrt(2) wide, 64 / sqrt(2) high,
    # centred at (5 * 16 + 8, 2 * 16 + 8).
    w, h = 64 * math.sqrt(2), 64 / math.sqrt(2)
    expected = torch.tensor([88 - w / 2, 40 - h / 2, 88 + w / 2, 40 + h / 2]) / s
    assert torch.allclose(_anchor(cfg, 4, 2, 5, 2), expected, atol=1e-6)
    # P5 last location, ratio 0.5 scale sqrt(2): 128 * sqrt(2) / sqrt(2) = 128 wide, 256 high.
    expected = torch.tensor([304 - 64, 304 - 128, 304 + 64, 304 + 128]) / s
    assert torch.allclose(_anchor(cfg, 5, 9, 9, 5), expected, atol=1e-6)
    # P7: 320 is not divisible by 128, so TF puts its 3x3 grid at 0, 128, 256 without the half-stride offset.
    assert torch.allclose(
        _anchor(cfg, 7, 1, 2, 0), torch.tensor([256 - 256, 128 - 256, 256 + 256, 128 + 256]) / s
    )


def test_centre_form_matches_corners() -> None:
    xyxy, xywh = generate_anchors_xyxy(), generate_anchors_xywh()
    assert torch.allclose(xywh[:, 2:], xyxy[:, 2:] - xyxy[:, :2], atol=1e-6)
    assert torch.allclose(xywh[:, :2], (xyxy[:, 2:] + xyxy[:, :2]) / 2, atol=1e-6)


@pytest.mark.parametrize("image_size", [320, 256, 128])
def test_equal_to_torchvision_anchor_generator_up_to_its_conventions(image_size: int) -> None:
    """torchvision's generator with TF's sizes gives the same anchors once its three conventions are
    undone: ratios are height / width (pass 1 / r), cell anchors are rounded to whole pixels (within 0.5
    px per coordinate), and centres lack the half-stride offset (added here where TF adds it)."""
    cfg = AnchorConfig(image_size=image_size)
    octave = [2 ** (i / cfg.scales_per_octave) for i in range(cfg.scales_per_octave)]
    sizes = tuple(tuple(cfg.anchor_scale * 2**level * o for o in octave) for level in cfg.levels)
    ratios = tuple(tuple(1 / r for r in cfg.aspect_ratios) for _ in cfg.levels)
    generator = AnchorGenerator(sizes, ratios)
    assert generator.num_anchors_per_location() == [cfg.anchors_per_location] * len(cfg.levels)
    grids = [[f, f] for f in cfg.feature_sizes]
    strides = [[torch.tensor(2**level), torch.tensor(2**level)] for level in cfg.levels]
    levels = generator.grid_anchors(grids, strides)
    offsets = [2**level / 2 if image_size % 2**level == 0 else 0.0 for level in cfg.levels]
    reference = torch.cat([a + off for a, off in zip(levels, offsets, strict=True)]) / image_size
    ours = generate_anchors_xyxy(cfg)
    assert ours.shape == reference.shape == (cfg.num_anchors, 4)
    assert float((ours - reference).abs().max()) <= 0.5 / image_size + 1e-6
    # Without the rounding they agree exactly: compare centres, which rounding keeps symmetric.
    assert torch.allclose(
        (ours[:, :2] + ours[:, 2:]) / 2, (reference[:, :2] + reference[:, 2:]) / 2, atol=1e-6
    )

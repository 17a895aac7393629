"""SSD320 anchors: the TF object detection API's ``multiscale_anchor_generator`` (levels 3-7).

Per level l (stride s = 2**l) and image side S: the feature map is ceil(S / s) square (SAME padding,
as both TF's ResNet and torchvision's give); the base anchor side is ``anchor_scale * s``; per location
there are ``len(aspect_ratios) * scales_per_octave`` anchors with, for ratio r (width / height) and
octave scale o = 2**(i / scales_per_octave), height = o * base / sqrt(r) and width = o * base * sqrt(r).
Anchor centres are ``(col * s + offset, row * s + offset)`` pixels, where TF puts the offset at half a
stride only when the image side is divisible by the stride (at 320 that is every level but P7, whose
3x3 grid starts at 0). Coordinates are normalized by the image side and, as in TF, not clipped.

Order: level, then row, then column, then anchor; within a location ratio-major, scale fastest
(TF's ``meshgrid(scales, aspect_ratios)``). The heads flatten ``[N, H, W, anchors * K]`` in the same
order, so prediction ``i`` belongs to anchor ``i``. At 320x320 that is 6 x (40² + 20² + 10² + 5² + 3²)
= 12,804 anchors.

torchvision's ``AnchorGenerator`` is the same construction up to three conventions (it takes ratio =
height / width, rounds the cell anchors to whole pixels and places centres at ``col * s`` without the
offset); ``tests/training/detectors/ssd320/test_anchors.py`` checks the two against each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from training.box_ops import xyxy_to_xywh


@dataclass(frozen=True)
class AnchorConfig:
    image_size: int = 320
    min_level: int = 3
    max_level: int = 7
    anchor_scale: float = 4.0
    aspect_ratios: tuple[float, ...] = field(default=(1.0, 2.0, 0.5))  # width / height
    scales_per_octave: int = 2

    def __post_init__(self) -> None:
        if self.image_size < 1:
            raise ValueError(f"image_size must be positive, got {self.image_size}")
        if not 1 <= self.min_level <= self.max_level:
            raise ValueError(f"levels must satisfy 1 <= min <= max, got {self.min_level}..{self.max_level}")

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(range(self.min_level, self.max_level + 1))

    @property
    def anchors_per_location(self) -> int:
        return len(self.aspect_ratios) * self.scales_per_octave

    @property
    def feature_sizes(self) -> tuple[int, ...]:
        """Side of each level's feature map: ceil(image_size / 2**level)."""
        return tuple(math.ceil(self.image_size / 2**level) for level in self.levels)

    @property
    def num_anchors(self) -> int:
        return self.anchors_per_location * sum(f * f for f in self.feature_sizes)

    def cell_sizes(self, level: int) -> list[tuple[float, float]]:
        """(width, height) in pixels of the anchors at one location of ``level``, in TF's order."""
        base = self.anchor_scale * 2**level
        octave_scales = [2 ** (i / self.scales_per_octave) for i in range(self.scales_per_octave)]
        return [
            (scale * base * math.sqrt(ratio), scale * base / math.sqrt(ratio))
            for ratio in self.aspect_ratios
            for scale in octave_scales
        ]


def generate_anchors_xyxy(cfg: AnchorConfig | None = None) -> Tensor:
    """``[A, 4]`` float32 anchors, (x1, y1, x2, y2) normalized by the image side (see module docstring)."""
    cfg = cfg or AnchorConfig()
    per_level = []
    for level, size in zip(cfg.levels, cfg.feature_sizes, strict=True):
        stride = 2**level
        offset = stride / 2 if cfg.image_size % stride == 0 else 0.0
        centres = torch.arange(size, dtype=torch.float64) * stride + offset
        cy, cx = torch.meshgrid(centres, centres, indexing="ij")  # (H, W): row-major grid
        wh = torch.tensor(cfg.cell_sizes(level), dtype=torch.float64)  # (k, 2)
        # (H, W, 1, 2) centres and (1, 1, k, 2) sizes -> (H, W, k, 4) -> (H * W * k, 4)
        centre = torch.stack([cx, cy], dim=-1).unsqueeze(2)
        half = (wh / 2).view(1, 1, -1, 2)
        boxes = torch.cat([centre - half, centre + half], dim=-1)
        per_level.append(boxes.reshape(-1, 4))
    return (torch.cat(per_level) / cfg.image_size).to(torch.float32)


def generate_anchors_xywh(cfg: AnchorConfig | None = None) -> Tensor:
    """The same anchors in centre form (cx, cy, w, h), as the box coder uses them."""
    return xyxy_to_xywh(generate_anchors_xyxy(cfg))

"""SSD300 default boxes (NVIDIA DeepLearningExamples layout).

Per feature map k of size f_k with step s_k and scales S_k, S_{k+1} (pixels of a ``fig_size`` image):
centre ((col + 0.5) * s_k / fig, (row + 0.5) * s_k / fig); box sizes per location, in order: small square
S_k/fig, big square sqrt(S_k * S_{k+1})/fig, then (w, h) = (S_k/fig * sqrt(r), S_k/fig / sqrt(r)) and its
transpose for each aspect ratio r. Coordinates clamped to [0, 1].

Order: level, then box size, then row, then column — NVIDIA's ``DefaultBoxes`` order. The heads reshape
``(N, nd * 4, H, W)`` to ``(N, 4, nd * H * W)``, so within a level the flat index is
``box * H * W + row * W + col``; the default boxes follow the same order, so every prediction is compared
with the default box at its own spatial position.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from training.box_ops import xywh_to_xyxy


@dataclass(frozen=True)
class DefaultBoxesConfig:
    fig_size: int = 300
    feature_sizes: tuple[int, ...] = (38, 19, 10, 5, 3, 1)
    steps: tuple[int, ...] = (8, 16, 32, 64, 100, 300)
    scales: tuple[int, ...] = (21, 45, 99, 153, 207, 261, 315)
    aspect_ratios: tuple[tuple[int, ...], ...] = field(default=((2,), (2, 3), (2, 3), (2, 3), (2,), (2,)))

    @property
    def boxes_per_location(self) -> tuple[int, ...]:
        return tuple(2 + 2 * len(r) for r in self.aspect_ratios)


def default_boxes_xywh(cfg: DefaultBoxesConfig | None = None) -> Tensor:
    """``[8732, 4]`` float32 default boxes in normalized centre form (cx, cy, w, h)."""
    cfg = cfg or DefaultBoxesConfig()
    boxes: list[tuple[float, float, float, float]] = []
    for idx, size in enumerate(cfg.feature_sizes):
        sk = cfg.scales[idx] / cfg.fig_size
        sk_next = cfg.scales[idx + 1] / cfg.fig_size
        sizes = [(sk, sk), (math.sqrt(sk * sk_next),) * 2]
        for ratio in cfg.aspect_ratios[idx]:
            w, h = sk * math.sqrt(ratio), sk / math.sqrt(ratio)
            sizes += [(w, h), (h, w)]
        scale = cfg.fig_size / cfg.steps[idx]
        for w, h in sizes:
            for row, col in itertools.product(range(size), repeat=2):
                boxes.append(((col + 0.5) / scale, (row + 0.5) / scale, w, h))
    return torch.tensor(boxes, dtype=torch.float32).clamp_(0.0, 1.0)


def default_boxes_xyxy(cfg: DefaultBoxesConfig | None = None) -> Tensor:
    """The same boxes in corner form (x1, y1, x2, y2), as used for matching."""
    return xywh_to_xyxy(default_boxes_xywh(cfg))

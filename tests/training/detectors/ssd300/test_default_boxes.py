import math

import torch

from training.detectors.ssd300.default_boxes import DefaultBoxesConfig, default_boxes_xywh, default_boxes_xyxy


def test_count_and_range() -> None:
    boxes = default_boxes_xywh()
    assert boxes.shape == (8732, 4)
    assert boxes.dtype == torch.float32
    assert float(boxes.min()) >= 0.0 and float(boxes.max()) <= 1.0
    cfg = DefaultBoxesConfig()
    per_level = [f * f * n for f, n in zip(cfg.feature_sizes, cfg.boxes_per_location, strict=True)]
    assert per_level == [5776, 2166, 600, 150, 36, 4]


def test_values_follow_the_formula() -> None:
    cfg = DefaultBoxesConfig()
    boxes = default_boxes_xywh(cfg)
    offsets = [0]
    for f, n in zip(cfg.feature_sizes, cfg.boxes_per_location, strict=True):
        offsets.append(offsets[-1] + f * f * n)
    for level, (f, step) in enumerate(zip(cfg.feature_sizes, cfg.steps, strict=True)):
        sk = cfg.scales[level] / 300
        sk_big = math.sqrt(sk * cfg.scales[level + 1] / 300)
        sizes = [(sk, sk), (sk_big, sk_big)]
        for r in cfg.aspect_ratios[level]:
            sizes += [(sk * math.sqrt(r), sk / math.sqrt(r)), (sk / math.sqrt(r), sk * math.sqrt(r))]
        fk = 300 / step
        for b, (w, h) in enumerate(sizes):
            for row, col in [(0, 0), (f - 1, f - 1), (f // 2, f - 1)]:
                idx = offsets[level] + b * f * f + row * f + col
                expected = torch.tensor([(col + 0.5) / fk, (row + 0.5) / fk, w, h]).clamp(0, 1)
                assert torch.allclose(boxes[idx], expected, atol=1e-6), (level, b, row, col)


def test_xyxy_matches_xywh() -> None:
    xywh, xyxy = default_boxes_xywh(), default_boxes_xyxy()
    assert torch.allclose(xyxy[:, 2:] - xyxy[:, :2], xywh[:, 2:], atol=1e-6)

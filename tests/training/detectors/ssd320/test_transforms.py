"""SSD320 augmentation: TF's random crop window (area 0.75-1, aspect 0.75-3), box pruning and clipping,
flip, and the whole transform's output contract."""

from __future__ import annotations

import numpy as np
import torch

from training.detectors.ssd320.transforms import SSD320TrainTransform, random_crop_image


def _coordinate_image(h: int, w: int) -> np.ndarray:
    """Pixels that say where they are: channel 0 = x, channel 1 = y (both < 256)."""
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = np.arange(w)[None, :]
    img[..., 1] = np.arange(h)[:, None]
    return img


def test_crop_window_area_aspect_and_boxes() -> None:
    h, w = 150, 240
    image = _coordinate_image(h, w)
    boxes = np.array([[0, 0, 30, 20], [100, 60, 160, 120], [225, 135, 240, 150]], np.float32)
    labels = np.array([1, 2, 3], np.int64)
    dropped = 0
    aspects = []
    for seed in range(200):
        out, kept, kept_labels = random_crop_image(image, boxes, labels, np.random.default_rng(seed))
        ch, cw = out.shape[:2]
        x0, y0 = int(out[0, 0, 0]), int(out[0, 0, 1])
        assert 0.75 * h * w <= ch * cw <= h * w
        aspects.append(cw / ch)
        # Boxes entirely outside the window are dropped; the rest are clipped to it.
        inside = (boxes[:, 0] < x0 + cw) & (boxes[:, 2] > x0) & (boxes[:, 1] < y0 + ch) & (boxes[:, 3] > y0)
        dropped += int((~inside).sum())
        np.testing.assert_array_equal(kept_labels, labels[inside])
        expected = boxes[inside].copy()
        expected[:, 0::2] = expected[:, 0::2].clip(x0, x0 + cw) - x0
        expected[:, 1::2] = expected[:, 1::2].clip(y0, y0 + ch) - y0
        np.testing.assert_allclose(kept, expected)
    # A 240x150 image (aspect 1.6) admits crops of aspect ~1.2 (full height, 75% width) up to 2.13
    # (full width, 75% height): TF's sampler draws from 0.75-3 and rejects what does not fit.
    assert 1.2 - 0.02 <= min(aspects) < 1.35 and 1.95 < max(aspects) <= 2.14 + 0.02
    assert dropped > 0  # corner objects do get cropped away


def test_crop_falls_back_to_the_whole_image_when_no_window_fits() -> None:
    image = _coordinate_image(10, 40)  # aspect 4 with area >= 0.75 cannot reach aspect <= 3
    boxes = np.array([[1, 1, 5, 5]], np.float32)
    out, kept, _ = random_crop_image(
        image, boxes, np.array([1]), np.random.default_rng(0), aspect=(0.75, 0.8)
    )
    assert out.shape == image.shape and np.array_equal(kept, boxes)


def test_transform_output_contract_and_flip() -> None:
    image = _coordinate_image(120, 160)
    target = {
        "boxes": np.array([[10, 20, 50, 60]], np.float32),
        "labels": np.array([2]),
        "image_id": 7,
        "orig_size": (120, 160),
    }
    transform = SSD320TrainTransform(size=64, seed=0)
    flipped = 0
    for _ in range(20):
        tensor, out = transform(image, target)
        assert tensor.shape == (3, 64, 64) and tensor.dtype == torch.float32
        assert out["image_id"] == 7 and out["labels"].dtype == torch.int64
        boxes = out["boxes"]
        assert boxes.shape == (1, 4) and float(boxes.min()) >= 0 and float(boxes.max()) <= 1
        # The box centre is left of the image centre unless the image was flipped.
        flipped += int(float(boxes[0, 0] + boxes[0, 2]) / 2 > 0.5)
    assert 0 < flipped < 20

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import torch

from training.detectors.ssd300.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    SSDEvalTransform,
    SSDTrainTransform,
    random_iou_crop,
)


def _coordinate_image(h: int, w: int) -> np.ndarray:
    """Pixels that say where they are: channel 0 = x, channel 1 = y (both < 256)."""
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = np.arange(w)[None, :]
    img[..., 1] = np.arange(h)[:, None]
    return img


def _iou(boxes: np.ndarray, window: np.ndarray) -> np.ndarray:
    lt = np.maximum(boxes[:, :2], window[:2])
    rb = np.minimum(boxes[:, 2:], window[2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    union = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1) + np.prod(window[2:] - window[:2]) - inter
    return inter / union


def test_iou_crop_keeps_centre_inside_boxes_and_clips_them() -> None:
    h, w = 180, 240
    image = _coordinate_image(h, w)
    boxes = np.array(
        [[10, 10, 60, 50], [100, 80, 200, 170], [150, 20, 230, 90], [30, 120, 90, 175]], np.float32
    )
    labels = np.array([1, 2, 3, 4], np.int64)
    cropped_count = 0
    for seed in range(60):
        out, kept, kept_labels = random_iou_crop(image, boxes, labels, np.random.default_rng(seed))
        if out.shape == image.shape:
            np.testing.assert_array_equal(kept, boxes)
            continue
        cropped_count += 1
        x0, y0 = int(out[0, 0, 0]), int(out[0, 0, 1])
        ch, cw = out.shape[:2]
        window = np.array([x0, y0, x0 + cw, y0 + ch], np.float32)
        # SSD's window limits: sides 0.3..1 of the image, relative aspect 0.5..2 (plus pixel rounding).
        assert 0.3 * w - 1 <= cw <= w and 0.3 * h - 1 <= ch <= h
        assert 0.5 - 0.02 <= (cw / w) / (ch / h) <= 2 + 0.02
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        inside = ((centres > window[:2]) & (centres < window[2:])).all(axis=1)
        assert inside.any()
        np.testing.assert_array_equal(kept_labels, labels[inside])
        expected = boxes[inside].copy()
        expected[:, 0::2] = expected[:, 0::2].clip(window[0], window[2]) - x0
        expected[:, 1::2] = expected[:, 1::2].clip(window[1], window[3]) - y0
        np.testing.assert_allclose(kept, expected)
        # Every original box passed the chosen mode's threshold; 0.0 is the loosest, so IoU > 0 at least.
        assert (_iou(boxes, window) > 0).all()
    # Every box must overlap the window, so with four spread-out boxes most draws end in "no crop" (the
    # seventh mode, redrawn until something succeeds) -- as in NVIDIA's loop and DALI's operator.
    assert 5 < cropped_count < 60


def test_flip_and_crop_keep_boxes_on_their_pixels() -> None:
    """A bright rectangle on a dark image must stay exactly under its box through every augmentation."""
    h, w = 200, 320
    box = np.array([[90, 40, 210, 130]], np.float32)
    image = np.full((h, w, 3), 20, np.uint8)
    image[40:130, 90:210] = 235
    transform = SSDTrainTransform(size=300, seed=5)
    flipped_seen = set()
    for _ in range(30):
        tensor, target = transform(image, {"boxes": box, "labels": np.array([3]), "image_id": 1})
        assert tensor.shape == (3, 300, 300) and tensor.dtype == torch.float32
        assert target["labels"].tolist() == [3] and target["image_id"] == 1
        x1, y1, x2, y2 = (target["boxes"][0] * 300).tolist()
        gray = tensor.mean(dim=0).numpy()
        bright = gray > (gray.max() + gray.min()) / 2
        ys, xs = np.nonzero(bright)
        # Resampling blurs edges by a pixel or two at most.
        assert abs(xs.min() - x1) <= 2 and abs(xs.max() + 1 - x2) <= 2
        assert abs(ys.min() - y1) <= 2 and abs(ys.max() + 1 - y2) <= 2
        # The box is left of centre in the source; the flip moves it right of centre.
        flipped_seen.add((x1 + x2) / 2 > 150)
    assert flipped_seen == {True, False}


def test_train_transform_is_reproducible_per_seed() -> None:
    image = np.random.default_rng(0).integers(0, 255, (120, 160, 3), dtype=np.uint8)
    target: dict[str, Any] = {"boxes": np.array([[10, 10, 90, 100]], np.float32), "labels": np.array([1])}
    a = [SSDTrainTransform(seed=1)(image, target), SSDTrainTransform(seed=1)(image, target)]
    torch.testing.assert_close(a[0][0], a[1][0])
    torch.testing.assert_close(a[0][1]["boxes"], a[1][1]["boxes"])
    other = SSDTrainTransform(seed=2)(image, target)
    assert not torch.equal(other[0], a[0][0])


def test_eval_transform_resizes_and_normalizes() -> None:
    image = np.zeros((100, 200, 3), np.uint8)
    image[...] = (255, 128, 0)
    boxes = np.array([[20, 10, 120, 90]], np.float32)
    tensor, target = SSDEvalTransform(300)(
        image, {"boxes": boxes, "labels": np.array([2]), "masks": "dropped"}
    )
    assert tensor.shape == (3, 300, 300) and tensor.dtype == torch.float32
    expected = (np.array([255, 128, 0]) / 255.0 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    np.testing.assert_allclose(tensor.mean(dim=(1, 2)).numpy(), expected, rtol=1e-5)
    torch.testing.assert_close(target["boxes"], torch.tensor([[0.1, 0.1, 0.6, 0.9]]))
    assert target["labels"].dtype == torch.int64 and "masks" not in target


def test_empty_targets_pass_through() -> None:
    image = np.zeros((64, 64, 3), np.uint8)
    target = {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros((0,), np.int64)}
    for transform in (SSDTrainTransform(seed=0), SSDEvalTransform()):
        tensor, out = transform(image, target)
        assert tensor.shape == (3, 300, 300)
        assert out["boxes"].shape == (0, 4) and out["labels"].shape == (0,)


def test_resize_matches_opencv_for_upscaling() -> None:
    image = np.random.default_rng(1).integers(0, 255, (50, 80, 3), dtype=np.uint8)
    tensor, _ = SSDEvalTransform(300)(image, {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0)})
    scaled = cv2.resize(image, (300, 300), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0
    ref = (scaled - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
    np.testing.assert_allclose(tensor.permute(1, 2, 0).numpy(), ref, atol=1e-5)

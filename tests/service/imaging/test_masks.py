"""Mask pasting (against a plain numpy transcription of torchvision's algorithm) and COCO RLE encoding."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from service.imaging.masks import (
    BAND_ROWS,
    PastedMask,
    encode_polygons,
    encode_rle,
    masks_to_rles,
    paste_mask,
)


def bilinear_resize(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """torch.nn.functional.interpolate(mode="bilinear", align_corners=False), written out."""
    in_h, in_w = image.shape

    def source(out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
        src = np.maximum(src, 0.0)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, in_size - 1)
        return lo, hi, src - lo

    y0, y1, wy = source(out_h, in_h)
    x0, x1, wx = source(out_w, in_w)
    top = image[y0][:, x0] * (1 - wx) + image[y0][:, x1] * wx
    bottom = image[y1][:, x0] * (1 - wx) + image[y1][:, x1] * wx
    return top * (1 - wy[:, None]) + bottom * wy[:, None]


def reference_paste(mask: np.ndarray, box: np.ndarray, im_h: int, im_w: int) -> np.ndarray:
    """torchvision.models.detection.roi_heads.paste_masks_in_image for one mask, then > 0.5."""
    m = mask.shape[-1]
    padded = np.pad(mask, 1)
    scale = (m + 2) / m
    b = box.astype(np.float32)
    w_half, h_half = (b[2] - b[0]) * np.float32(0.5), (b[3] - b[1]) * np.float32(0.5)
    x_c, y_c = (b[2] + b[0]) * np.float32(0.5), (b[3] + b[1]) * np.float32(0.5)
    w_half, h_half = w_half * np.float32(scale), h_half * np.float32(scale)
    bx0, by0, bx1, by1 = (int(v) for v in (x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half))
    w, h = max(bx1 - bx0 + 1, 1), max(by1 - by0 + 1, 1)
    resized = bilinear_resize(padded.astype(np.float64), h, w)
    image = np.zeros((im_h, im_w))
    x_0, x_1 = max(bx0, 0), min(bx1 + 1, im_w)
    y_0, y_1 = max(by0, 0), min(by1 + 1, im_h)
    if x_1 > x_0 and y_1 > y_0:
        image[y_0:y_1, x_0:x_1] = resized[y_0 - by0 : y_1 - by0, x_0 - bx0 : x_1 - bx0]
    return image > 0.5


def to_full(pasted: PastedMask, im_h: int, im_w: int) -> np.ndarray:
    full = np.zeros((im_h, im_w), dtype=bool)
    h, w = pasted.bitmap.shape
    full[pasted.y0 : pasted.y0 + h, pasted.x0 : pasted.x0 + w] = pasted.bitmap
    return full


BOXES = [
    [10.3, 12.7, 40.2, 35.9],  # upsampled: box larger than the mask
    [3.4, 5.1, 6.9, 8.2],  # downsampled: box smaller than the mask
    [-6.5, -3.2, 20.4, 15.6],  # sticks out top-left
    [50.2, 30.6, 75.8, 52.3],  # sticks out bottom-right
    [20.0, 20.0, 20.4, 20.3],  # under a pixel
]


@pytest.mark.parametrize("box", BOXES)
def test_paste_matches_torchvision_reference(box: list[float]) -> None:
    rng = np.random.default_rng(7)
    mask = rng.random((7, 7), dtype=np.float32)
    im_h, im_w = 48, 64
    expected = reference_paste(mask, np.array(box), im_h, im_w)
    got = to_full(paste_mask(mask, np.array(box), im_h, im_w), im_h, im_w)
    np.testing.assert_array_equal(got, expected)


def test_box_entirely_outside_the_image_gives_an_empty_mask() -> None:
    pasted = paste_mask(np.ones((5, 5), np.float32), np.array([100.0, 100.0, 120.0, 120.0]), 48, 64)
    assert pasted.bitmap.size == 0
    rle = encode_rle(pasted, 48, 64)
    assert not mask_utils.decode({"size": rle["size"], "counts": str(rle["counts"]).encode()}).any()


@pytest.mark.parametrize("box", BOXES)
def test_rle_matches_pycocotools_on_the_full_mask(box: list[float]) -> None:
    rng = np.random.default_rng(11)
    im_h, im_w = 48, 64
    pasted = paste_mask(rng.random((6, 6), dtype=np.float32), np.array(box), im_h, im_w)
    full = to_full(pasted, im_h, im_w)
    expected = mask_utils.encode(np.asfortranarray(full.astype(np.uint8)))
    rle = encode_rle(pasted, im_h, im_w)
    assert rle == {"size": [im_h, im_w], "counts": expected["counts"].decode("ascii")}
    decoded = mask_utils.decode({"size": [im_h, im_w], "counts": str(rle["counts"]).encode()})
    np.testing.assert_array_equal(decoded.astype(bool), full)


def test_rle_of_a_mask_touching_the_first_pixel() -> None:
    pasted = PastedMask(0, 0, np.ones((3, 2), bool))
    rle = encode_rle(pasted, 4, 5)
    full = to_full(pasted, 4, 5)
    assert rle["counts"] == mask_utils.encode(np.asfortranarray(full.astype(np.uint8)))["counts"].decode()


def test_non_square_masks_paste_into_their_box() -> None:
    mask = np.zeros((4, 8), np.float32)
    mask[1:3, 2:6] = 1.0
    pasted = paste_mask(mask, np.array([8.0, 8.0, 24.0, 16.0]), 32, 32)
    full = to_full(pasted, 32, 32)
    ys, xs = np.nonzero(full)
    # The filled middle of the mask lands in the middle of the box.
    assert 10 <= xs.min() <= xs.max() <= 22 and 9 <= ys.min() <= ys.max() <= 15


def test_memory_stays_bounded_by_the_boxes_not_the_image() -> None:
    rng = np.random.default_rng(3)
    k, im_h, im_w = 40, 1500, 2000
    masks = rng.random((k, 28, 28), dtype=np.float32)
    corners = rng.uniform([0, 0], [im_w - 200, im_h - 200], size=(k, 2))
    boxes = np.concatenate([corners, corners + 150], axis=1).astype(np.float32)
    full_float_mask = im_h * im_w * 4  # what one full-image float mask would cost: 12 MB
    tracemalloc.start()
    try:
        rles = masks_to_rles(masks, boxes, im_h, im_w)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rles) == k
    assert peak < full_float_mask / 4, f"peak {peak} bytes"


def test_tall_boxes_paste_in_bands_exactly_as_the_reference() -> None:
    rng = np.random.default_rng(5)
    mask = rng.random((28, 28), dtype=np.float32)
    im_h, im_w = 3 * BAND_ROWS + 40, 50
    box = np.array([3.3, -20.5, 47.9, im_h + 30.2], dtype=np.float32)  # taller than the image, cut
    expected = reference_paste(mask, box, im_h, im_w)
    np.testing.assert_array_equal(to_full(paste_mask(mask, box, im_h, im_w), im_h, im_w), expected)


def test_polygons_decode_to_the_pasted_mask_and_fill_holes() -> None:
    yy, xx = np.mgrid[0:28, 0:28]
    blob = ((xx - 10) ** 2 + (yy - 12) ** 2 < 40).astype(np.float32)
    blob[20:25, 3:26] = 1.0  # a second, separate part
    pasted = paste_mask(blob, np.array([5.2, 7.9, 60.4, 50.1]), 64, 80)
    polygons = encode_polygons(pasted)
    assert len(polygons) == 2
    decoded = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polygons, 64, 80)))
    np.testing.assert_array_equal(decoded.astype(bool), to_full(pasted, 64, 80))
    ring = PastedMask(2, 3, np.pad(np.zeros((3, 3), bool), 2, constant_values=True))
    (outline,) = encode_polygons(ring)
    filled = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects([outline], 12, 12)))
    assert filled.sum() == 7 * 7  # the hole is filled: polygons carry outer outlines only
    assert encode_polygons(PastedMask(0, 0, np.zeros((0, 0), bool))) == []

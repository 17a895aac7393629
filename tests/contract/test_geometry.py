"""The one resize rule and the box mappings of `contract.geometry`."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from contract.geometry import interpolation, letterbox_geometry, resize, stretch_resize, stretch_to_original


@pytest.mark.parametrize(
    ("src", "dst", "expected"),
    [
        ((640, 480), (300, 300), cv2.INTER_AREA),  # shrinking both ways
        ((200, 480), (300, 300), cv2.INTER_AREA),  # shrinking one axis wins over enlarging the other
        ((100, 80), (300, 300), cv2.INTER_LINEAR),  # enlarging
        ((300, 300), (300, 300), cv2.INTER_LINEAR),
    ],
)
def test_area_filter_when_shrinking_along_either_axis(
    src: tuple[int, int], dst: tuple[int, int], expected: int
) -> None:
    assert interpolation(*src, *dst) == expected


def test_resize_keeps_the_dtype_and_passes_an_image_of_the_target_size_through() -> None:
    image = np.random.default_rng(0).uniform(0, 255, (40, 60, 3)).astype(np.float32)
    assert resize(image, 60, 40) is image
    out = resize(image, 30, 20)
    assert out.shape == (20, 30, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out, cv2.resize(image, (30, 20), interpolation=cv2.INTER_AREA))


def test_stretch_mappings_back_to_original_pixels() -> None:
    boxes = np.array([[0.1, 0.2, 0.5, 1.2]], dtype=np.float32)
    np.testing.assert_allclose(stretch_to_original(boxes, (200, 100)), [[10, 40, 50, 240]], rtol=1e-6)
    # The service's transform of the same stretch also clips to the image.
    _, transform = stretch_resize(np.zeros((200, 100, 3), np.uint8), 64, 64)
    np.testing.assert_allclose(transform.boxes_to_original(boxes), [[10, 40, 50, 200]], rtol=1e-6)


def test_letterbox_scales_by_one_factor_to_fit() -> None:
    geometry = letterbox_geometry(480, 640, 256, 256)
    assert (geometry.resized_width, geometry.resized_height) == (256, 192)
    assert geometry.scale_x == pytest.approx(0.4) and geometry.scale_y == pytest.approx(0.4)

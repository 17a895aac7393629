"""Boxed-image rendering: boxes and masks drawn where the detections are, JPEG and PNG encodings."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from service.manifest import Label
from service.masks import PastedMask
from service.postprocess import Detections
from service.render import color_for, draw_detections, render_detections

LABELS = (Label(name="cat"), Label(name="dog"))


def detections(boxes: list[list[float]], classes: list[int]) -> Detections:
    n = len(boxes)
    return Detections(
        boxes=np.array(boxes, dtype=np.float32).reshape(n, 4),
        scores=np.linspace(0.9, 0.5, n, dtype=np.float32),
        classes=np.array(classes, dtype=np.int32),
        rows=np.arange(n),
    )


def decode(data: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)  # BGR
    assert image is not None
    return image


def test_png_draws_the_box_outline_in_its_class_colour_and_leaves_the_rest() -> None:
    image = np.full((120, 160, 3), 40, np.uint8)
    data = render_detections(image, detections([[40, 50, 120, 100]], [1]), LABELS, "png")
    assert data.startswith(b"\x89PNG")
    out = decode(data)
    assert out.shape == (120, 160, 3)
    assert tuple(int(c) for c in out[75, 120]) == color_for(1)  # right edge of the box
    assert tuple(int(c) for c in out[75, 80]) == (40, 40, 40)  # inside the box: untouched
    assert tuple(int(c) for c in out[5, 5]) == (40, 40, 40)  # far outside: untouched


def test_jpeg_output_is_a_jpeg_of_the_original_size() -> None:
    image = np.full((90, 70, 3), 128, np.uint8)
    data = render_detections(image, detections([[10, 10, 60, 80]], [0]), LABELS)
    assert data.startswith(b"\xff\xd8")
    assert decode(data).shape == (90, 70, 3)


def test_no_detections_leaves_the_image_unchanged() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    out = decode(render_detections(image, detections([], []), LABELS, "png"))
    np.testing.assert_array_equal(out, cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def test_masks_tint_only_their_pixels() -> None:
    image = np.zeros((60, 60, 3), np.uint8)
    bitmap = np.zeros((20, 20), bool)
    bitmap[5:15, 5:15] = True
    canvas = draw_detections(image, detections([[2, 2, 58, 58]], [0]), LABELS, [PastedMask(20, 20, bitmap)])
    assert canvas[30, 30].any()  # inside the mask: tinted
    assert not canvas[22, 22].any()  # inside the mask's region but not the mask: untouched
    assert not canvas[45, 45].any()  # inside the box, outside the mask


@pytest.mark.parametrize("box", [[0, 0, 10, 10], [-5, -5, 500, 500]])
def test_boxes_at_or_beyond_the_edges_render(box: list[float]) -> None:
    image = np.zeros((40, 40, 3), np.uint8)
    assert decode(render_detections(image, detections([box], [0]), LABELS, "png")).shape == (40, 40, 3)


def test_masks_may_come_from_a_generator_pasted_one_at_a_time() -> None:
    image = np.zeros((300, 200, 3), np.uint8)
    detections = Detections(
        boxes=np.array([[0, 0, 200, 300], [10, 10, 20, 20]], np.float32),
        scores=np.array([0.9, 0.8], np.float32),
        classes=np.array([0, 0], np.int32),
        rows=np.arange(2),
    )
    big = PastedMask(0, 0, np.ones((300, 200), bool))  # taller than one blending band
    drawn = draw_detections(image, detections, [Label(name="a"), Label(name="b")], (m for m in [big, big]))
    inside = drawn[150, 100].astype(int)
    colour = np.asarray(color_for(0), np.float32)
    expected = colour * 0.45 * (1 - 0.45) + colour * 0.45  # blended onto black, then onto itself
    assert np.abs(inside - expected.astype(int)).max() <= 2  # tinted twice, once per mask

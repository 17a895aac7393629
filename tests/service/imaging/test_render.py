"""Boxed-image rendering: boxes and masks drawn where the detections are, JPEG and PNG encodings."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from contract.manifest import Label
from service.imaging.masks import PastedMask
from service.imaging.postprocess import KeptDetections
from service.imaging.render import color_for, draw_detections, place_caption, render_detections

LABELS = (Label(name="cat"), Label(name="dog"))


def detections(boxes: list[list[float]], classes: list[int]) -> KeptDetections:
    n = len(boxes)
    return KeptDetections(
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
    detections = KeptDetections(
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


def overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_captions_of_boxes_sharing_a_corner_do_not_cover_each_other() -> None:
    box, size, image = (50, 40, 150, 140), (60, 14), (200, 200)
    taken: list[tuple[int, int, int, int]] = []
    for _ in range(3):
        left, top = place_caption(box, size, image, taken)
        placed = (left, top, left + size[0], top + size[1])
        assert not any(overlap(placed, other) for other in taken)
        assert 0 <= left <= 200 - size[0] and 0 <= top <= 200 - size[1]
        taken.append(placed)
    assert taken[0][1] == 40 - 14  # the first (best-scoring) caption keeps the spot above the box


@pytest.mark.parametrize("box", [(190, 0, 200, 30), (0, 185, 30, 200), (-10, -10, 300, 300)])
def test_captions_stay_inside_the_image(box: tuple[int, int, int, int]) -> None:
    left, top = place_caption(box, (60, 14), (200, 200), [])
    assert 0 <= left <= 200 - 60 and 0 <= top <= 200 - 14


def test_both_captions_of_two_identical_boxes_are_visible() -> None:
    image = np.full((120, 160, 3), 40, np.uint8)
    out = decode(render_detections(image, detections([[40, 50, 120, 100]] * 2, [0, 1]), LABELS, "png"))
    # The second box's outline covers the first's exactly, so class 0's colour shows only if its
    # caption does; each caption is a filled patch of its class colour.
    for class_id in (0, 1):
        assert (out == color_for(class_id)).all(axis=2).sum() > 100

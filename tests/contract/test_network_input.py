"""Resizing decoded images to the network input, and mapping boxes back to original pixels."""

from __future__ import annotations

import numpy as np
import pytest

from contract.geometry import letterbox_resize, resize_for_network, stretch_resize
from contract.manifest import InputSpec

# ----------------------------------------------------------------------------------------- resizing


def test_stretch_resize_and_its_inverse() -> None:
    image = np.zeros((100, 300, 3), np.uint8)
    resized, transform = stretch_resize(image, 64, 32)
    assert resized.shape == (32, 64, 3)
    # The whole network input maps to the whole image.
    np.testing.assert_allclose(transform.boxes_to_original(np.array([[0, 0, 1, 1]])), [[0, 0, 300, 100]])
    np.testing.assert_allclose(
        transform.boxes_to_original(np.array([[0.5, 0.25, 0.75, 0.5]])), [[150, 25, 225, 50]]
    )


@pytest.mark.parametrize(
    ("height", "width", "content"),
    [
        (300, 100, (64, 21)),  # tall: height fills the network input, width padded on the right
        (100, 400, (16, 64)),  # wide: width fills, height padded at the bottom
    ],
)
def test_letterbox_pastes_top_left_and_pads(height: int, width: int, content: tuple[int, int]) -> None:
    image = np.full((height, width, 3), 200, np.uint8)
    resized, transform = letterbox_resize(image, 64, 64, pad_value=(114, 115, 116))
    content_h, content_w = content
    assert resized.shape == (64, 64, 3)
    assert (resized[:content_h, :content_w] == 200).all()
    assert (resized[content_h:, :] == (114, 115, 116)).all()
    assert (resized[:, content_w:] == (114, 115, 116)).all()
    # The content's corner in network coordinates maps back to the image's far corner.
    far = transform.boxes_to_original(np.array([[0, 0, content_w / 64, content_h / 64]]))
    np.testing.assert_allclose(far, [[0, 0, width, height]], rtol=1e-6)


def test_box_mapping_clips_to_the_image() -> None:
    _, transform = letterbox_resize(np.zeros((300, 100, 3), np.uint8), 64, 64)
    # A box reaching into the padding is clipped at the image edge.
    np.testing.assert_allclose(
        transform.boxes_to_original(np.array([[0.5, 0.5, 1.0, 1.0]])), [[100, 150, 100, 300]]
    )


def test_resize_for_network_follows_the_manifest() -> None:
    image = np.full((30, 90, 3), 10, np.uint8)
    stretched, _ = resize_for_network(image, InputSpec(height=48, width=64, resize="stretch"))
    boxed, _ = resize_for_network(
        image, InputSpec(height=48, width=64, resize="letterbox", pad_value=(1, 2, 3))
    )
    assert stretched.shape == boxed.shape == (48, 64, 3)
    assert (stretched == 10).all()
    assert (boxed[-1, -1] == (1, 2, 3)).all()

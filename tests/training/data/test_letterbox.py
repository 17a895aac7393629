"""Training's letterbox is the service's letterbox: same pixels, same way back to the original image."""

from __future__ import annotations

import numpy as np
import pytest

from contract.geometry import letterbox_resize as service_letterbox
from training.data.letterbox import letterbox_geometry, letterbox_resize, mean_pad_value

SIZES = [(480, 160), (160, 480), (100, 100), (37, 301), (301, 37), (64, 48), (1, 500), (256, 256), (17, 9)]


@pytest.mark.parametrize(("height", "width"), SIZES)
@pytest.mark.parametrize(("net_h", "net_w"), [(256, 256), (128, 192)])
def test_same_pixels_and_box_mapping_as_the_service(height: int, width: int, net_h: int, net_w: int) -> None:
    rng = np.random.default_rng(height * 1000 + width)
    image = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    pad = (124, 116, 104)
    ours, geometry = letterbox_resize(image, net_w, net_h, pad)
    theirs, transform = service_letterbox(image, net_w, net_h, pad)
    assert ours.dtype == np.uint8 and ours.shape == (net_h, net_w, 3)
    np.testing.assert_array_equal(ours, theirs)
    assert (geometry.scale_x, geometry.scale_y) == (transform.scale_x, transform.scale_y)
    boxes = rng.uniform(-0.1, 1.1, size=(20, 4)).astype(np.float32)
    np.testing.assert_array_equal(geometry.boxes_to_original(boxes), transform.boxes_to_original(boxes))


@pytest.mark.parametrize(("height", "width"), [(400, 120), (120, 400)])
def test_a_letterboxed_detection_maps_back_to_the_right_original_pixels(height: int, width: int) -> None:
    """A red rectangle at known pixels of a tall / wide image: find it in the network input, map it back."""
    image = np.zeros((height, width, 3), dtype=np.uint8)
    x1, y1, x2, y2 = (width // 5, height // 3, width // 5 + width // 2, height // 3 + height // 4)
    image[y1:y2, x1:x2] = (255, 0, 0)
    canvas, geometry = letterbox_resize(image, 160, 160, mean_pad_value((0.485, 0.456, 0.406)))
    # The pad never reaches the resized content; the content touches the top-left corner.
    assert geometry.resized_height == 160 or geometry.resized_width == 160
    assert (canvas[geometry.resized_height :, :] == (124, 116, 104)).all()
    assert (canvas[:, geometry.resized_width :] == (124, 116, 104)).all()
    red = (canvas[..., 0] > 127) & (canvas[..., 1] < 64) & (canvas[..., 2] < 64)
    rows, cols = np.flatnonzero(red.any(axis=1)), np.flatnonzero(red.any(axis=0))
    detected = np.array([[cols[0], rows[0], cols[-1] + 1, rows[-1] + 1]], dtype=np.float32) / 160.0
    back = geometry.boxes_to_original(detected)[0]
    # Within the resampling blur: one network pixel is 1 / scale original pixels.
    tolerance = 1.0 / min(geometry.scale_x, geometry.scale_y) + 0.5
    np.testing.assert_allclose(back, [x1, y1, x2, y2], atol=tolerance)
    # And to the network and back again.
    roundtrip = geometry.boxes_to_network(np.array([[x1, y1, x2, y2]], dtype=np.float32)) / 160.0
    np.testing.assert_allclose(geometry.boxes_to_original(roundtrip)[0], [x1, y1, x2, y2], atol=1e-3)


def test_geometry_rejects_empty_sizes() -> None:
    with pytest.raises(ValueError, match="sizes must be positive"):
        letterbox_geometry(0, 10, 64, 64)

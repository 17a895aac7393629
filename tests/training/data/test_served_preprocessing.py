"""Training's evaluation transforms feed the network the pixels the service serves, for both resize modes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contract.geometry import resize_for_network
from contract.manifest import InputSpec
from training.detectors.efficientdet.transforms import EFFICIENTDET_PAD_VALUE, EfficientDetEvalTransform
from training.detectors.maskrcnn.data import MaskRCNNEvalTransform
from training.detectors.ssd300.transforms import SSDEvalTransform, normalize_to_tensor

# Shrinking, enlarging, and mixed (one side shrinks, the other grows) against the network sizes used.
SIZES = [(480, 640), (120, 90), (37, 301), (640, 200), (300, 300), (256, 256)]


def _image(height: int, width: int) -> np.ndarray:
    return np.random.default_rng(height * 7919 + width).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _target() -> dict[str, object]:
    return {"image_id": 1, "boxes": np.array([[1.0, 2.0, 20.0, 30.0]], np.float32), "labels": np.array([1])}


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_stretch_training_transform_equals_served_preprocessing(height: int, width: int) -> None:
    image = _image(height, width)
    trained, _ = SSDEvalTransform(300)(image, _target())
    served, transform = resize_for_network(image, InputSpec(height=300, width=300, resize="stretch"))
    assert served.shape == (300, 300, 3) and served.dtype == np.uint8
    assert torch.equal(trained, normalize_to_tensor(served))
    assert (transform.original_width, transform.original_height) == (width, height)


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_letterbox_training_transforms_equal_served_preprocessing(height: int, width: int) -> None:
    image = _image(height, width)
    spec = InputSpec(height=256, width=256, resize="letterbox", pad_value=EFFICIENTDET_PAD_VALUE)
    served, transform = resize_for_network(image, spec)
    canvas, target = MaskRCNNEvalTransform(256, EFFICIENTDET_PAD_VALUE)(image, _target())
    np.testing.assert_array_equal(canvas.numpy(), served)
    assert target["letterbox"] == transform
    normalized, effdet_target = EfficientDetEvalTransform(256)(image, _target())
    assert torch.equal(normalized, normalize_to_tensor(served))
    assert effdet_target["letterbox"] == transform

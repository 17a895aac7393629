"""Mask R-CNN's data pipeline: image, boxes and masks transformed together; letterboxed evaluation."""

from pathlib import Path

import numpy as np
import torch

from training.data.coco import CocoDetection
from training.data.letterbox import Letterbox
from training.data.loader import LoaderRequest
from training.detectors.maskrcnn.data import (
    MaskRCNNEvalTransform,
    MaskRCNNTrainTransform,
    collate_train,
    maskrcnn_train_loader,
)


def _mask_box(mask: np.ndarray) -> np.ndarray:
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=np.float32)


def test_flip_and_jitter_move_masks_with_their_boxes(synthetic_root: Path) -> None:
    dataset = CocoDetection(synthetic_root, "train", with_masks=True, skip_empty=True)
    image, target = dataset[0]
    for flip in (0.0, 1.0):
        transform = MaskRCNNTrainTransform(128, jitter=(0.5, 1.5), flip_probability=flip, seed=1)
        for _ in range(3):
            out, t = transform(image, target)
            h, w = out.shape[:2]
            assert out.dtype == torch.uint8 and out.shape[2] == 3
            assert 64 <= max(h, w) <= 192  # the long side follows the jitter
            assert t["masks"].shape == (len(t["labels"]), h, w) and t["masks"].dtype == torch.uint8
            for box, mask in zip(t["boxes"].numpy(), t["masks"].numpy(), strict=True):
                # the mask's pixel extent is its box, up to the resize's rounding
                np.testing.assert_allclose(_mask_box(mask), box, atol=2.0)
    flipped, t_flip = MaskRCNNTrainTransform(128, jitter=(1.0, 1.0), flip_probability=1.0)(image, target)
    plain, t_plain = MaskRCNNTrainTransform(128, jitter=(1.0, 1.0), flip_probability=0.0)(image, target)
    # Flipping commutes with the resize (up to OpenCV's fixed-point rounding).
    assert np.abs(flipped.numpy()[:, ::-1].astype(int) - plain.numpy()).max() <= 1
    assert (t_flip["masks"].numpy()[:, :, ::-1] != t_plain["masks"].numpy()).mean() < 0.01


def test_train_batches_and_letterboxed_eval(synthetic_root: Path) -> None:
    loader = maskrcnn_train_loader(LoaderRequest("torch", synthetic_root, "train", 3, 0, 0), 96)
    images, sizes, targets = next(iter(loader))
    assert images.dtype == torch.uint8 and images.shape[0] == 3 and images.shape[3] == 3
    assert images.shape[1] % 32 == 0 and images.shape[2] % 32 == 0
    for (h, w), target in zip(sizes, targets, strict=True):
        assert target["masks"].shape[1:] == (h, w)
        assert set(target) == {"boxes", "labels", "masks"}
    dataset = CocoDetection(synthetic_root, "val", transforms=MaskRCNNEvalTransform(96, (124, 116, 104)))
    canvas, info = dataset[0]
    letterbox = info["letterbox"]
    assert canvas.shape == (96, 96, 3) and isinstance(letterbox, Letterbox)
    assert max(letterbox.resized_height, letterbox.resized_width) == 96
    pad = canvas[letterbox.resized_height :, letterbox.resized_width :]
    assert (pad.reshape(-1, 3) == torch.tensor([124, 116, 104], dtype=torch.uint8)).all()
    batch = collate_train([(torch.zeros(40, 70, 3, dtype=torch.uint8), {**targets[0]})])
    assert batch[0].shape == (1, 64, 96, 3) and batch[1] == [(40, 70)]

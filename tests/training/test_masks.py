"""Pasting low-resolution masks for evaluation: torchvision's paste, chunked, encoded as COCO RLE."""

import numpy as np
import pytest
import torch
from torchvision.models.detection.roi_heads import paste_masks_in_image

from training.masks import CHUNK, mask_iou, masks_to_rles, paste_masks, rle_to_mask


def test_rles_decode_to_torchvisions_pasted_masks() -> None:
    torch.manual_seed(0)
    k, height, width = CHUNK * 2 + 3, 60, 80  # several chunks and a partial one
    masks = torch.rand(k, 28, 28)
    corners = torch.rand(k, 2) * torch.tensor([70.0, 50.0]) - 5.0
    boxes = torch.cat([corners, corners + torch.rand(k, 2) * 40 + 1], dim=1)
    expected = paste_masks_in_image(masks[:, None], boxes, (height, width), padding=1)[:, 0] > 0.5
    rles = masks_to_rles(masks, boxes, height, width)
    assert len(rles) == k
    for rle, reference in zip(rles, expected, strict=True):
        assert rle["size"] == [height, width] and isinstance(rle["counts"], str)
        np.testing.assert_array_equal(rle_to_mask(rle), reference.numpy())


def test_paste_rejects_bad_shapes_and_iou_of_empty_masks() -> None:
    with pytest.raises(ValueError, match=r"\[K, M, M\]"):
        paste_masks(torch.zeros(2, 28, 14), torch.zeros(2, 4), 10, 10)
    with pytest.raises(ValueError, match="boxes"):
        paste_masks(torch.zeros(2, 28, 28), torch.zeros(3, 4), 10, 10)
    empty = np.zeros((4, 4), bool)
    assert mask_iou(empty, empty) == 1.0
    assert masks_to_rles(torch.zeros(0, 28, 28), torch.zeros(0, 4), 10, 10) == []

"""Instance masks for COCO evaluation: low-resolution probabilities -> image-sized binary masks -> RLE.

Detectors with a mask head (Mask R-CNN) predict ``[K, M, M]`` mask probabilities in each detection's
box frame. They are pasted into the original image with torchvision's own ``paste_masks_in_image``
(pad by one pixel, grow the box by (M + 2) / M, bilinear resize into the box, threshold 0.5: what
torchvision's Mask R-CNN evaluation does; the service's ``service.imaging.masks`` reproduces it without torch)
and encoded as COCO compressed RLE with pycocotools.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from pycocotools import mask as mask_utils
from torch import Tensor
from torchvision.models.detection.roi_heads import paste_masks_in_image

MASK_THRESHOLD = 0.5
# torchvision pastes every mask of an image into its own full-image float tensor at once; pasting a few
# at a time bounds that to CHUNK x height x width floats.
CHUNK = 8


def paste_masks(masks: Tensor, boxes: Tensor, height: int, width: int) -> Tensor:
    """``[K, M, M]`` probabilities, ``[K, 4]`` xyxy boxes in image pixels -> bool ``[K, height, width]``."""
    if masks.dim() != 3 or masks.shape[1] != masks.shape[2]:
        raise ValueError(f"masks must be [K, M, M], got {tuple(masks.shape)}")
    if boxes.shape != (masks.shape[0], 4):
        raise ValueError(f"boxes must be [{masks.shape[0]}, 4], got {tuple(boxes.shape)}")
    pasted = paste_masks_in_image(masks.float()[:, None], boxes.float(), (height, width), padding=1)
    return cast("Tensor", pasted[:, 0] > MASK_THRESHOLD)


def masks_to_rles(masks: Tensor, boxes: Tensor, height: int, width: int) -> list[dict[str, Any]]:
    """COCO RLEs ``{"size": [height, width], "counts": str}`` of pasted masks (see :func:`paste_masks`)."""
    masks, boxes = masks.detach().cpu(), boxes.detach().cpu()
    rles: list[dict[str, Any]] = []
    for start in range(0, masks.shape[0], CHUNK):
        binary = paste_masks(masks[start : start + CHUNK], boxes[start : start + CHUNK], height, width)
        # (k, H, W) -> (H, W, k), Fortran order: pycocotools encodes column-major.
        stack = np.asfortranarray(binary.permute(1, 2, 0).numpy().astype(np.uint8))
        for rle in mask_utils.encode(stack):
            rles.append({"size": [height, width], "counts": rle["counts"].decode("ascii")})
    return rles


def rle_to_mask(rle: dict[str, Any]) -> np.ndarray:
    """bool ``[h, w]`` of a COCO RLE whose ``counts`` is a str or bytes."""
    counts = rle["counts"]
    encoded = {"size": list(rle["size"]), "counts": counts.encode() if isinstance(counts, str) else counts}
    return np.asarray(mask_utils.decode(encoded), dtype=bool)


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two boolean masks of the same shape (1.0 when both are empty)."""
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


__all__ = ["MASK_THRESHOLD", "mask_iou", "masks_to_rles", "paste_masks", "rle_to_mask"]

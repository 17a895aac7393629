"""Instance masks: paste low-resolution mask probabilities into the image and encode them as COCO RLE.

Pasting follows torchvision's ``paste_masks_in_image`` (what Mask R-CNN's evaluation uses): pad the
[Mh, Mw] mask by one zero pixel on each side, grow the box about its centre by (M + 2) / M so the padded
mask still lines up with it, truncate the grown box to integers, resize the padded mask bilinearly to
that box (+1 pixel, inclusive corners), keep the part inside the image, and threshold at 0.5.

Memory stays bounded: one mask at a time, and only a box-sized region is ever materialized (the RLE is
computed from that region; no full-image float mask exists).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from pycocotools import mask as mask_utils

MASK_THRESHOLD = 0.5


@dataclass(frozen=True)
class PastedMask:
    """A binary mask in image coordinates: ``bitmap`` covers rows y0.. and columns x0.. of the image."""

    x0: int
    y0: int
    bitmap: np.ndarray  # bool [h, w]; may be 0-sized when the box lies outside the image


def paste_mask(
    mask: np.ndarray, box: np.ndarray, image_height: int, image_width: int, threshold: float = MASK_THRESHOLD
) -> PastedMask:
    """Paste one [Mh, Mw] probability mask into the box x1, y1, x2, y2 (original-image pixels)."""
    mask = np.asarray(mask, dtype=np.float32)
    mh, mw = mask.shape
    padded = np.pad(mask, 1)  # zero border: the mask fades out at the box edge instead of being cut
    # Grow the box so the padded mask keeps the unpadded mask's footprint (torchvision's expand_boxes,
    # in float32 and in its order of operations, so the integer box below comes out the same).
    x1, y1, x2, y2 = np.asarray(box, dtype=np.float32)
    half_w = (x2 - x1) * np.float32(0.5) * np.float32((mw + 2) / mw)
    half_h = (y2 - y1) * np.float32(0.5) * np.float32((mh + 2) / mh)
    cx, cy = (x2 + x1) * np.float32(0.5), (y2 + y1) * np.float32(0.5)
    # int() truncates toward zero, as torchvision's .to(torch.int64) does.
    bx0, by0, bx1, by1 = int(cx - half_w), int(cy - half_h), int(cx + half_w), int(cy + half_h)
    w = max(bx1 - bx0 + 1, 1)
    h = max(by1 - by0 + 1, 1)
    x_0, x_1 = max(bx0, 0), min(bx1 + 1, image_width)
    y_0, y_1 = max(by0, 0), min(by1 + 1, image_height)
    if x_1 <= x_0 or y_1 <= y_0:
        return PastedMask(
            max(0, min(x_0, image_width)), max(0, min(y_0, image_height)), np.zeros((0, 0), bool)
        )
    # Bilinear with half-pixel centres, as torch's interpolate(align_corners=False).
    resized = cv2.resize(padded, (w, h), interpolation=cv2.INTER_LINEAR)
    region = resized[y_0 - by0 : y_1 - by0, x_0 - bx0 : x_1 - bx0] > threshold
    return PastedMask(x_0, y_0, region)


def encode_rle(pasted: PastedMask, image_height: int, image_width: int) -> dict[str, object]:
    """COCO compressed RLE ``{"size": [h, w], "counts": str}`` of a pasted mask (column-major runs)."""
    total = image_height * image_width
    bitmap = pasted.bitmap
    if bitmap.size == 0 or not bitmap.any():
        counts = [total]
    else:
        h, w = bitmap.shape
        # The box's columns at full image height, flattened column-major: (H, w) -> (H * w,).
        columns = np.zeros((image_height, w), dtype=bool)
        columns[pasted.y0 : pasted.y0 + h] = bitmap
        stream = columns.ravel(order="F")
        changes = np.flatnonzero(stream[1:] != stream[:-1]) + 1
        runs = np.diff(np.concatenate(([0], changes, [stream.size]))).tolist()
        before = pasted.x0 * image_height  # zeros in the columns left of the box
        after = total - before - stream.size  # zeros in the columns right of the box
        # COCO runs alternate starting with a (possibly empty) run of zeros.
        counts = [before, *runs] if stream[0] else [before + runs[0], *runs[1:]]
        last_is_zero = len(counts) % 2 == 1
        if last_is_zero:
            counts[-1] += after
        elif after:
            counts.append(after)
    rle = mask_utils.frPyObjects(
        {"size": [image_height, image_width], "counts": counts}, image_height, image_width
    )
    return {"size": [image_height, image_width], "counts": rle["counts"].decode("ascii")}


def masks_to_rles(
    masks: np.ndarray, boxes: np.ndarray, image_height: int, image_width: int
) -> list[dict[str, object]]:
    """RLEs for [N, Mh, Mw] mask probabilities and their [N, 4] boxes in original-image pixels."""
    return [
        encode_rle(paste_mask(mask, box, image_height, image_width), image_height, image_width)
        for mask, box in zip(masks, boxes, strict=True)
    ]

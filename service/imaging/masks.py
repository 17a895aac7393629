"""Instance masks: paste low-resolution mask probabilities into the image; encode as COCO RLE or polygons.

Pasting follows torchvision's ``paste_masks_in_image`` (what Mask R-CNN's evaluation uses): pad the
[Mh, Mw] mask by one zero pixel on each side, grow the box about its centre by (M + 2) / M so the padded
mask still lines up with it, truncate the grown box to integers, resize the padded mask bilinearly to
that box (+1 pixel, inclusive corners; half-pixel centres as ``interpolate(align_corners=False)``),
keep the part inside the image, and threshold at 0.5.

Memory stays bounded by one box, never the image times the detections: masks are pasted one at a time,
and the bilinear resize is separable, so the box is produced in bands of :data:`BAND_ROWS` rows from
the horizontally resized ``(Mh + 2) x w`` mask; only the bool bitmap of the box's part inside the image
is kept (one byte per pixel). No full-image or box-sized float mask exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from pycocotools import mask as mask_utils

MASK_THRESHOLD = 0.5
BAND_ROWS = 256  # rows of a box resized at a time: BAND_ROWS x box width float32


@dataclass(frozen=True)
class PastedMask:
    """A binary mask in image coordinates: ``bitmap`` covers rows y0.. and columns x0.. of the image."""

    x0: int
    y0: int
    bitmap: np.ndarray  # bool [h, w]; may be 0-sized when the box lies outside the image


def _source_rows(
    out_size: int, in_size: int, start: int, stop: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear (align_corners=False) source rows and weights of output rows ``start..stop``."""
    scale = np.float32(in_size / out_size)
    src = (np.arange(start, stop, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    src = np.maximum(src, np.float32(0.0))
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, in_size - 1)
    return lo, hi, (src - lo).astype(np.float32)


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
    # Horizontal pass for all Mh + 2 rows (cv2: exact for an unchanged height), only the visible columns.
    rows = cv2.resize(padded, (w, mh + 2), interpolation=cv2.INTER_LINEAR)[:, x_0 - bx0 : x_1 - bx0]
    region = np.empty((y_1 - y_0, x_1 - x_0), dtype=bool)
    # Vertical pass in bands of output rows.
    for start in range(y_0 - by0, y_1 - by0, BAND_ROWS):
        stop = min(start + BAND_ROWS, y_1 - by0)
        lo, hi, frac = _source_rows(h, mh + 2, start, stop)
        band = rows[lo] * (np.float32(1.0) - frac)[:, None] + rows[hi] * frac[:, None]
        region[start - (y_0 - by0) : stop - (y_0 - by0)] = band > threshold
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


def encode_polygons(pasted: PastedMask) -> list[list[float]]:
    """COCO polygons ``[[x0, y0, x1, y1, ...], ...]`` of a pasted mask's outer outlines, image pixels.

    Vertices lie on pixel corners (pixel (r, c) covers [c, c + 1] x [r, r + 1]): the mask is traced at
    twice its resolution and each traced point ``p`` maps to ``(p + 1) // 2``, so a hole-free mask
    decodes back (pycocotools) to exactly its pixels. Holes cannot be expressed as COCO polygons and are
    filled; use RLE for exact masks.
    """
    if pasted.bitmap.size == 0 or not pasted.bitmap.any():
        return []
    up = np.repeat(np.repeat(pasted.bitmap.astype(np.uint8), 2, axis=0), 2, axis=1)
    contours, _ = cv2.findContours(up, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    polygons: list[list[float]] = []
    offset = np.array([pasted.x0, pasted.y0], dtype=np.int64)
    for contour in contours:
        pts = (contour[:, 0, :].astype(np.int64) + 1) // 2
        pts = pts[np.any(pts != np.roll(pts, 1, axis=0), axis=1)]  # drop repeated vertices (cyclic)
        # Keep only corners: where the incoming and outgoing unit steps differ.
        d_in = np.sign(pts - np.roll(pts, 1, axis=0))
        d_out = np.sign(np.roll(pts, -1, axis=0) - pts)
        pts = pts[np.any(d_in != d_out, axis=1)]
        if len(pts) >= 3:  # COCO polygons need at least three vertices
            polygons.append([float(v) for v in (pts + offset).reshape(-1)])
    return polygons


def masks_to_rles(
    masks: np.ndarray, boxes: np.ndarray, image_height: int, image_width: int
) -> list[dict[str, object]]:
    """RLEs for [N, Mh, Mw] mask probabilities and their [N, 4] boxes in original-image pixels."""
    return [
        encode_rle(paste_mask(mask, box, image_height, image_width), image_height, image_width)
        for mask, box in zip(masks, boxes, strict=True)
    ]


def masks_to_polygons(
    masks: np.ndarray, boxes: np.ndarray, image_height: int, image_width: int
) -> list[list[list[float]]]:
    """Polygons (see :func:`encode_polygons`) for [N, Mh, Mw] mask probabilities and their [N, 4] boxes."""
    return [
        encode_polygons(paste_mask(mask, box, image_height, image_width))
        for mask, box in zip(masks, boxes, strict=True)
    ]

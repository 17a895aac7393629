"""Draw detections on the original image and encode it (JPEG by default; PNG is ~10x slower to encode).

CPU-bound: callers run `render_detections` in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import cv2
import numpy as np

from contract.manifest import Label
from service.imaging.masks import PastedMask
from service.imaging.postprocess import KeptDetections

ImageFormat = Literal["jpeg", "png"]
MEDIA_TYPES: dict[str, str] = {"jpeg": "image/jpeg", "png": "image/png"}

# BGR colours, one per class index (cycled): a qualitative palette that stays readable on photos.
_PALETTE: tuple[tuple[int, int, int], ...] = (
    (56, 56, 255),
    (151, 157, 255),
    (31, 112, 255),
    (29, 178, 255),
    (49, 210, 207),
    (10, 249, 72),
    (23, 204, 146),
    (134, 219, 61),
    (52, 147, 26),
    (187, 212, 0),
    (168, 153, 44),
    (255, 194, 0),
    (147, 69, 52),
    (255, 115, 100),
    (236, 24, 0),
    (255, 56, 132),
    (133, 0, 82),
    (255, 56, 203),
    (200, 149, 255),
    (199, 55, 255),
)
MASK_ALPHA = 0.45
_BLEND_ROWS = 128
JPEG_QUALITY = 90


Rect = tuple[int, int, int, int]  # x1, y1, x2, y2 in pixels


def place_caption(
    box: Rect, size: tuple[int, int], image_size: tuple[int, int], taken: Sequence[Rect]
) -> tuple[int, int]:
    """Top-left corner for a ``size`` (w, h) caption of ``box`` inside a ``image_size`` (w, h) image.

    Tries above the box, then inside its top edge, then below it, then further down inside the box,
    and takes the first spot that stays in the image and covers none of the ``taken`` captions; when
    every spot is covered (a crowded image) the first one in the image wins.
    """
    x1, y1, _, y2 = box
    w, h = size
    width, height = image_size
    left = min(max(x1, 0), max(width - w, 0))
    tops = [y1 - h, y1, y2, *range(y1 + h, y2 - h + 1, h)]
    fits = [top for top in tops if top >= 0 and top + h <= height] or [min(max(y1, 0), max(height - h, 0))]
    for top in fits:
        if not any(left < tr and top < tb and tl < left + w and tt < top + h for tl, tt, tr, tb in taken):
            return left, top
    return left, fits[0]


def color_for(class_id: int) -> tuple[int, int, int]:
    return _PALETTE[class_id % len(_PALETTE)]


def draw_detections(
    image_rgb: np.ndarray,
    detections: KeptDetections,
    labels: Sequence[Label],
    masks: Iterable[PastedMask] | None = None,
    grid: Sequence[tuple[int, int, int, int]] = (),
    track_ids: Sequence[int] | None = None,
) -> np.ndarray:
    """A BGR copy of ``image_rgb`` with translucent masks, then boxes and "label score" captions on top
    ("label #track score" with ``track_ids``, where one is >= 0); ``grid`` (x0, y0, x1, y1 tiles of a tiled
    request), if given, drawn first as thin white frames.

    ``masks`` align with the detections and are consumed one at a time (a generator that pastes each
    mask on demand keeps one pasted mask in memory at a time).
    """
    canvas = cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR)
    height, width = canvas.shape[:2]
    # Line and text sizes grow with the image so boxes stay visible on large photos.
    thickness = max(1, round(min(height, width) / 320))
    font_scale = max(0.35, min(height, width) / 900)
    for x0, y0, x1, y1 in grid:  # thinner than the boxes: the grid is context, not a result
        cv2.rectangle(
            canvas, (x0, y0), (x1 - 1, y1 - 1), (255, 255, 255), max(1, thickness // 3), cv2.LINE_AA
        )
    if masks is not None:
        for i, pasted in enumerate(masks):
            h, w = pasted.bitmap.shape
            if not h or not w:
                continue
            tint = np.asarray(color_for(int(detections.classes[i])), dtype=np.float32) * MASK_ALPHA
            # In bands of rows: the float copy of a large mask's pixels stays small.
            for top in range(0, h, _BLEND_ROWS):
                rows = slice(pasted.y0 + top, pasted.y0 + min(top + _BLEND_ROWS, h))
                region = canvas[rows, pasted.x0 : pasted.x0 + w]
                inside = pasted.bitmap[top : top + _BLEND_ROWS]
                region[inside] = (region[inside].astype(np.float32) * (1 - MASK_ALPHA) + tint).astype(
                    np.uint8
                )
    boxes = [tuple(round(float(v)) for v in detections.boxes[i]) for i in range(len(detections))]
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        # Crisp: exactly the class colour.
        cv2.rectangle(canvas, (x1, y1), (x2, y2), color_for(int(detections.classes[i])), thickness)
    # Captions after all the boxes, so no box line crosses a caption, and placed in score order
    # (detections come best first) where they do not cover an earlier caption.
    taken: list[Rect] = []
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        class_id = int(detections.classes[i])
        track = f" #{track_ids[i]}" if track_ids is not None and track_ids[i] >= 0 else ""
        caption = f"{labels[class_id].name}{track} {float(detections.scores[i]):.2f}"
        (text_w, text_h), baseline = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 1)
        left, top = place_caption(
            (x1, y1, x2, y2), (text_w + 2, text_h + baseline + 2), (width, height), taken
        )
        right, bottom = left + text_w + 2, top + text_h + baseline + 2
        taken.append((left, top, right, bottom))
        cv2.rectangle(canvas, (left, top), (right, bottom), color_for(class_id), cv2.FILLED)
        cv2.putText(
            canvas,
            caption,
            (left + 1, top + text_h + 1),
            cv2.FONT_HERSHEY_SIMPLEX,
            font_scale,
            (255, 255, 255),
            1,
            cv2.LINE_AA,
        )
    return canvas


def encode_image(image_bgr: np.ndarray, fmt: ImageFormat) -> bytes:
    """Encode a BGR image as JPEG (quality 90) or PNG."""
    if fmt == "jpeg":
        ok, buffer = cv2.imencode(".jpg", image_bgr, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    else:
        ok, buffer = cv2.imencode(".png", image_bgr)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {image_bgr.shape} image as {fmt}")
    return buffer.tobytes()


def render_detections(
    image_rgb: np.ndarray,
    detections: KeptDetections,
    labels: Sequence[Label],
    fmt: ImageFormat = "jpeg",
    masks: Iterable[PastedMask] | None = None,
    grid: Sequence[tuple[int, int, int, int]] = (),
    track_ids: Sequence[int] | None = None,
) -> bytes:
    """The boxed image, encoded: what ``format=jpeg|png`` returns (and a stream's snapshot)."""
    return encode_image(draw_detections(image_rgb, detections, labels, masks, grid, track_ids), fmt)

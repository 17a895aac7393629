"""Merging the detections of overlapping tiles back into one image's detections.

An object on a tile border is seen twice (whole in one tile, cut in its neighbour) or in pieces. Two ways
to resolve that, both class-aware and greedy by descending score, as SAHI's numpy backend
(``sahi.postprocess._numpy_backend``: ``nms_numpy`` and ``greedy_nmm_numpy``, per category), which
``tests/service/imaging/test_merging.py`` checks them against on the same boxes:

- ``nms``: keep the best box, drop every box of its class that overlaps it by ``threshold`` or more.
- ``greedy_nmm`` (non-maximum merging): the same groups, but the kept box is joined (union) with the
  boxes of its group that a tile border cut (or with all of them when the kept box itself was cut), so
  the pieces of an object cut at a tile border become one box. Unlike SAHI, which joins every box of a
  group, an uncut box never grows another: at a low score threshold a large, low-scored box overlapping
  a small object would otherwise stretch that object's box (measured in docs/tiling.md).

Overlap is ``iou`` (intersection over union) or ``ios`` (intersection over the smaller box: a piece
cut at a border lies almost inside the whole object, so its IoS is high where its IoU is not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
from numpy.typing import NDArray

from service.imaging.postprocess import KeptDetections

MergeMethod = Literal["nms", "greedy_nmm"]
MatchMetric = Literal["iou", "ios"]


@dataclass(frozen=True)
class MergeRule:
    """How overlapping tiles' detections are merged."""

    method: MergeMethod = "greedy_nmm"
    metric: MatchMetric = "iou"
    threshold: float = 0.5


def overlap_matrix(boxes: NDArray[np.float32], metric: MatchMetric) -> NDArray[np.float32]:
    """``[N, N]`` pairwise IoU or IoS of ``[N, 4]`` x1, y1, x2, y2 boxes (0 where a box has no area)."""
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    x1 = np.maximum(boxes[:, None, 0], boxes[None, :, 0])
    y1 = np.maximum(boxes[:, None, 1], boxes[None, :, 1])
    x2 = np.minimum(boxes[:, None, 2], boxes[None, :, 2])
    y2 = np.minimum(boxes[:, None, 3], boxes[None, :, 3])
    inter = np.maximum(0, x2 - x1) * np.maximum(0, y2 - y1)
    if metric == "iou":
        denominator = areas[:, None] + areas[None, :] - inter
    else:
        denominator = np.minimum(areas[:, None], areas[None, :])
    out = np.zeros_like(inter, dtype=np.float32)
    np.divide(inter, denominator, out=out, where=denominator > 0)
    return out


def group_detections(
    boxes: NDArray[np.float32], scores: NDArray[np.float32], classes: NDArray[np.int32], rule: MergeRule
) -> dict[int, list[int]]:
    """Greedy groups, by descending score, within each class: each kept index -> the indices it absorbs
    (dropped for ``nms``, merged into it for ``greedy_nmm``). Keys are in descending score order."""
    groups: dict[int, list[int]] = {}
    for cls in np.unique(classes):
        members = np.flatnonzero(classes == cls)
        matrix = overlap_matrix(boxes[members], rule.metric)
        b = boxes[members]
        # Ties broken by coordinates, as SAHI does, so the result does not depend on input order.
        order = np.lexsort((b[:, 3], b[:, 2], b[:, 1], b[:, 0], -scores[members]))
        taken = np.zeros(len(members), dtype=bool)
        for position, local in enumerate(order):
            if taken[local]:
                continue
            later = order[position + 1 :]
            absorbed = later[~taken[later] & (matrix[local, later] >= rule.threshold)]
            taken[absorbed] = True
            taken[local] = True
            groups[int(members[local])] = [int(members[i]) for i in absorbed]
    return dict(sorted(groups.items(), key=lambda item: -float(scores[item[0]])))


@dataclass(frozen=True)
class TilePart:
    """One view's detections in original pixels, their masks (mask models), and which of them touch a
    tile border inside the image (cut there: `service.imaging.tiling.cut_by_tile`)."""

    detections: KeptDetections
    masks: NDArray[np.float32] | None
    cut: NDArray[np.bool_]


def joined_members(keep: int, absorbed: list[int], cut: NDArray[np.bool_], rule: MergeRule) -> list[int]:
    """The group members the kept box is joined with: none for ``nms``; for ``greedy_nmm`` the cut ones,
    or all when the kept box was cut itself. The kept index comes first."""
    if rule.method == "nms":
        return [keep]
    return [keep, *(i for i in absorbed if cut[keep] or cut[i])]


def union_box(boxes: NDArray[np.float32], members: list[int]) -> NDArray[np.float32]:
    """The smallest box holding ``boxes[members]``."""
    group = boxes[members]
    return np.array([*group[:, :2].min(axis=0), *group[:, 2:].max(axis=0)], dtype=np.float32)


def merged_mask(
    masks: NDArray[np.float32], boxes: NDArray[np.float32], members: list[int], union: NDArray[np.float32]
) -> NDArray[np.float32]:
    """One low-resolution mask for ``union`` from the group's masks (each ``[Mh, Mw]`` over its own box):
    each is resampled into the union box's frame and the group's maximum taken per cell."""
    mh, mw = masks.shape[1:]
    out = np.zeros((mh, mw), dtype=np.float32)
    ux1, uy1, ux2, uy2 = (float(v) for v in union)
    for i in members:
        x1, y1, x2, y2 = (float(v) for v in boxes[i])
        if x2 <= x1 or y2 <= y1:
            continue
        # Union cell u -> pixel x = ux1 + u * (ux2 - ux1) / mw -> member cell (x - x1) * mw / (x2 - x1).
        sx = (ux2 - ux1) / (x2 - x1)
        sy = (uy2 - uy1) / (y2 - y1)
        affine = np.array([[sx, 0, (ux1 - x1) * mw / (x2 - x1)], [0, sy, (uy1 - y1) * mh / (y2 - y1)]])
        warped = cv2.warpAffine(
            masks[i],
            affine,
            (mw, mh),
            flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=0.0,
        )
        np.maximum(out, warped, out=out)
    return out


def merge_detections(
    parts: list[TilePart], rule: MergeRule, limit: int
) -> tuple[KeptDetections, NDArray[np.float32] | None]:
    """One image's detections from its views' (each in original pixels, with its masks or None), merged
    by ``rule``, best first, at most ``limit``. The result's ``rows`` index the returned masks."""
    boxes = np.concatenate([p.detections.boxes for p in parts]).astype(np.float32).reshape(-1, 4)
    scores = np.concatenate([p.detections.scores for p in parts]).astype(np.float32)
    classes = np.concatenate([p.detections.classes for p in parts]).astype(np.int32)
    cut = np.concatenate([p.cut for p in parts]).astype(bool)
    all_masks = [p.masks for p in parts if p.masks is not None]
    masks = np.concatenate(all_masks) if len(all_masks) == len(parts) and parts else None
    groups = list(group_detections(boxes, scores, classes, rule).items())[:limit]
    members = [joined_members(keep, absorbed, cut, rule) for keep, absorbed in groups]
    kept_boxes = [union_box(boxes, group) for group in members]
    kept_masks = None
    if masks is not None:
        kept_masks = masks[:0]
        if groups:
            kept_masks = np.stack(
                [
                    # A joined box gets its members' masks joined in its frame.
                    masks[group[0]] if len(group) == 1 else merged_mask(masks, boxes, group, box)
                    for group, box in zip(members, kept_boxes, strict=True)
                ]
            )
    keep_rows = np.array([keep for keep, _ in groups], dtype=np.int64)
    detections = KeptDetections(
        boxes=np.array(kept_boxes, dtype=np.float32).reshape(-1, 4),
        scores=scores[keep_rows],
        classes=classes[keep_rows],
        rows=np.arange(len(groups), dtype=np.int64),
    )
    return detections, kept_masks

"""The detections an imported model should give, computed apart from its graph: the head decoded in numpy
from the source runtime's raw outputs, then per-class NMS with ``torchvision.ops.batched_nms``.

Semantics match ``exporters.onnx.postprocess_graph`` (per image and class: scores above the threshold, the
``topk_per_class`` best, greedy NMS; then the ``max_detections`` best over all classes), so a difference
between the two is a fault of the graph, not of a definition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import batched_nms

from exporters.importing.spec import AnchorHead, BoxFormat, DecodedHead, DetectionsHead, ImportSpec


@dataclass
class Detections:
    boxes: np.ndarray  # [N, 4] x1, y1, x2, y2 normalized
    scores: np.ndarray  # [N]
    classes: np.ndarray  # [N]


def _probabilities(scores: np.ndarray, kind: str, background: int | None) -> np.ndarray:
    """[A, C(+1)] raw -> [A, C] probabilities without the background column."""
    scores = scores.astype(np.float64)
    if kind == "sigmoid":
        scores = 1.0 / (1.0 + np.exp(-scores))
    elif kind == "softmax":
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        scores = e / e.sum(axis=1, keepdims=True)
    if background is not None:
        scores = np.delete(scores, background, axis=1)
    return scores


def _xyxy(boxes: np.ndarray, box_format: BoxFormat, normalized: bool, size: tuple[int, int]) -> np.ndarray:
    a, b, c, d = boxes.astype(np.float64).T
    if box_format == "yxyx":
        a, b, c, d = b, a, d, c
    elif box_format == "cxcywh":
        a, b, c, d = a - c / 2, b - d / 2, a + c / 2, b + d / 2
    xyxy = np.stack([a, b, c, d], axis=1)
    return xyxy if normalized else xyxy / np.array([size[1], size[0], size[1], size[0]])


def decode_anchors(codes: np.ndarray, anchors: np.ndarray, head: AnchorHead) -> np.ndarray:
    """[A, 4] box codes -> [A, 4] x1, y1, x2, y2 (normalized)."""
    codes = codes.astype(np.float64)
    if head.box_order == "yxhw":
        ty, tx, th, tw = codes.T
        sy, sx, sh, sw = head.box_scales
    else:
        tx, ty, tw, th = codes.T
        sx, sy, sw, sh = head.box_scales
    cy = ty / sy * anchors[:, 2] + anchors[:, 0]
    cx = tx / sx * anchors[:, 3] + anchors[:, 1]
    h = np.exp(th / sh) * anchors[:, 2]
    w = np.exp(tw / sw) * anchors[:, 3]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _nms(boxes: np.ndarray, probabilities: np.ndarray, spec: ImportSpec) -> Detections:
    p = spec.postprocess
    keep_boxes, keep_scores, keep_classes = [], [], []
    for c in range(probabilities.shape[1]):
        order = np.argsort(-probabilities[:, c], kind="stable")[: p.topk_per_class]
        order = order[probabilities[order, c] > p.score_threshold]
        keep_boxes.append(boxes[order])
        keep_scores.append(probabilities[order, c])
        keep_classes.append(np.full(len(order), c))
    b, s, k = (np.concatenate(x) for x in (keep_boxes, keep_scores, keep_classes))
    kept = batched_nms(torch.from_numpy(b), torch.from_numpy(s), torch.from_numpy(k), p.iou_threshold).numpy()
    kept = kept[: p.max_detections]
    return Detections(b[kept], s[kept], k[kept])


def reference_detections(
    spec: ImportSpec, raw: dict[str, np.ndarray], index: int, anchors: np.ndarray | None
) -> Detections:
    """Image ``index``'s detections from the source runtime's outputs ``raw``."""
    head, size = spec.head, (spec.input.height, spec.input.width)
    if isinstance(head, AnchorHead):
        assert anchors is not None
        boxes = decode_anchors(raw[head.boxes][index], anchors.astype(np.float64), head)
        return _nms(boxes, _probabilities(raw[head.scores][index], head.score, head.background_class), spec)
    if isinstance(head, DecodedHead):
        boxes = _xyxy(raw[head.boxes][index], head.box_format, head.normalized, size)
        return _nms(boxes, _probabilities(raw[head.scores][index], head.score, head.background_class), spec)
    assert isinstance(head, DetectionsHead)
    scores = raw[head.scores][index].astype(np.float64)
    order = np.argsort(-scores, kind="stable")
    order = order[scores[order] > spec.postprocess.score_threshold][: spec.postprocess.max_detections]
    boxes = _xyxy(raw[head.boxes][index][order], head.box_format, head.normalized, size)
    classes = np.rint(raw[head.classes][index][order]).astype(np.int64) - head.class_offset
    return Detections(boxes, scores[order], classes)

"""From one image's contract outputs to detections in original-image pixels.

Input (one image, batch dimension removed): ``num_detections`` [1], ``detection_boxes`` [K, 4] normalized
to the network input, ``detection_scores`` [K] (descending), ``detection_classes`` [K] (label indices).
Rows at or beyond ``num_detections`` are padding and ignored. Request filters apply in this order:
score threshold, class filter, then the first ``max_detections`` rows by score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from contract.manifest import Label, Manifest
from service.errors import BackendError, BadRequest
from service.schemas import Box, Detection, RLEMask


@dataclass(frozen=True)
class DetectParams:
    """Per-request filters; None means the manifest's default (or no class filter)."""

    score_threshold: float | None = None
    max_detections: int | None = None
    class_ids: frozenset[int] | None = None


class BoxMapping(Protocol):
    """Maps boxes normalized to a network input back to original-image pixels (`BoxTransform`, or a tile's
    view of the image in `service.pipeline.detect`)."""

    def boxes_to_original(self, boxes: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class KeptDetections:
    """The detections of one image kept after thresholds and the class filter, in original-image
    pixels. ``rows`` index the model's K outputs (to pick their masks)."""

    boxes: np.ndarray  # float32 [N, 4] original-image pixels
    scores: np.ndarray  # float32 [N]
    classes: np.ndarray  # int32 [N]
    rows: np.ndarray  # int64 [N]

    def __len__(self) -> int:
        return len(self.scores)


def parse_class_filter(spec: str | None, labels: tuple[Label, ...]) -> frozenset[int] | None:
    """``"person, 18,dog"`` -> label indices. Names match case-insensitively. An integer is a category id
    (a label's ``coco_id``) when every label declares one, else a label index: never both, so an integer
    has one meaning per model.

    Raises `BadRequest` (field ``classes``) naming the first unknown entry, or when ``spec`` names no
    class at all (``""``, ``",,,"``: a filter that would silently drop everything). None -> no filter.
    """
    if spec is None:
        return None
    if not spec.replace(",", "").strip():
        raise BadRequest(
            f"classes: no class given (got {spec!r}); list class names or category ids, or leave the "
            "parameter out to keep every class",
            field="classes",
        )
    by_name = {label.name.lower(): index for index, label in enumerate(labels)}
    ids: set[int] = set()
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        if token.lstrip("-").isdigit():
            ids.add(_class_number(int(token), labels))
        elif token.lower() in by_name:
            ids.add(by_name[token.lower()])
        else:
            known = ", ".join(label.name for label in labels[:20]) + (", ..." if len(labels) > 20 else "")
            raise BadRequest(f"classes: unknown class {token!r}; this model knows {known}", field="classes")
    return frozenset(ids)


def _class_number(number: int, labels: tuple[Label, ...]) -> int:
    """The label index an integer in ``classes=`` names (see `parse_class_filter`)."""
    by_category = {label.coco_id: index for index, label in enumerate(labels)}
    if None not in by_category:
        if number in by_category:
            return by_category[number]
        known = ", ".join(f"{label.coco_id} ({label.name})" for label in labels[:20])
        raise BadRequest(
            f"classes: {number} is not a category id of this model; integers are category ids "
            f"(coco_id): {known}{', ...' if len(labels) > 20 else ''}; names work too",
            field="classes",
        )
    if not 0 <= number < len(labels):
        raise BadRequest(
            f"classes: class id {number} is out of range; this model declares no category ids, so integers "
            f"are label indices 0..{len(labels) - 1}",
            field="classes",
        )
    return number


def valid_count(outputs: dict[str, np.ndarray], rows: int) -> int:
    """How many of an image's ``rows`` output rows hold detections: its ``num_detections``, within 0..rows
    (a plain clamp: ``np.clip`` on one number costs several times as much, once per image on the event
    loop)."""
    return min(max(int(np.asarray(outputs["num_detections"]).reshape(-1)[0]), 0), rows)


def select_detections(
    outputs: dict[str, np.ndarray], transform: BoxMapping, manifest: Manifest, params: DetectParams
) -> KeptDetections:
    """Filter one image's outputs by ``params`` and map its boxes to original-image pixels.

    Raises `BackendError` if a class index is outside the manifest's labels (artifact and manifest
    disagree; guessing a label would be worse than failing).
    """
    k = outputs["detection_scores"].shape[0]
    count = valid_count(outputs, k)
    scores = outputs["detection_scores"][:count]
    classes = outputs["detection_classes"][:count]
    threshold = manifest.default_threshold if params.score_threshold is None else params.score_threshold
    keep = scores >= threshold
    if params.class_ids is not None:
        keep &= np.isin(classes, list(params.class_ids))
    rows = np.flatnonzero(keep)
    # Stable sort by descending score: the contract promises order, but do not rely on every exporter.
    rows = rows[np.argsort(-scores[rows], kind="stable")]
    limit = manifest.max_detections if params.max_detections is None else params.max_detections
    rows = rows[:limit]
    kept_classes = classes[rows].astype(np.int32)
    bad = kept_classes[(kept_classes < 0) | (kept_classes >= len(manifest.labels))]
    if bad.size:
        raise BackendError(
            f"model {manifest.name!r} returned class index {int(bad[0])}, but its manifest has "
            f"{len(manifest.labels)} labels"
        )
    return KeptDetections(
        boxes=transform.boxes_to_original(outputs["detection_boxes"][rows]),
        scores=scores[rows].astype(np.float32),
        classes=kept_classes,
        rows=rows.astype(np.int64),
    )


def to_schema(
    detections: KeptDetections,
    labels: tuple[Label, ...],
    masks: list[dict[str, object]] | None = None,
    polygons: list[list[list[float]]] | None = None,
) -> list[Detection]:
    """Response objects for ``detections``; ``masks`` (COCO RLEs) or ``polygons``, if given, align."""
    result: list[Detection] = []
    for i in range(len(detections)):
        class_id = int(detections.classes[i])
        x1, y1, x2, y2 = (round(float(v), 2) for v in detections.boxes[i])
        result.append(
            Detection(
                class_id=class_id,
                category_id=labels[class_id].coco_id,
                label=labels[class_id].name,
                score=round(float(detections.scores[i]), 5),
                box=Box(x1=x1, y1=y1, x2=x2, y2=y2),
                mask=RLEMask.model_validate(masks[i]) if masks is not None else None,
                polygons=polygons[i] if polygons is not None else None,
            )
        )
    return result

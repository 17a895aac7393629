"""Quality statistics of a detector's output: the same counts live (the service's metrics) and on the
validation split at export time (the manifest's ``quality`` baseline), so the two compare directly.

What is counted, per image: the model's detections **at or above its display threshold**
(`contract.manifest.Manifest.default_threshold`), over all classes, before any request's own filters
(``score_threshold``, ``classes``, ``max_detections``), so the signal describes the model on its traffic,
not what clients ask for. From them: per class, the detections per image (a histogram, zero included) and
their scores (a histogram); per model, the images with no detection and the images' longer side.

Classes beyond the first `MAX_CLASS_LABELS` labels are counted together as `OTHER_CLASS`, which bounds the
number of label values whatever the model. Everything is numpy per image: no loop over detections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

MAX_CLASS_LABELS = 100
OTHER_CLASS = "other"
# Upper bounds (``le``) of the histograms; +Inf is implied.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DETECTIONS_PER_IMAGE_BUCKETS = (0, 1, 2, 4, 8, 16, 32)
LONGER_SIDE_BUCKETS = (160, 320, 480, 640, 800, 1024, 1280, 1600, 1920, 2560, 3840, 5120)


def class_names(labels: tuple[str, ...]) -> tuple[str, ...]:
    """The class label values: the first `MAX_CLASS_LABELS` names, then `OTHER_CLASS` when there are more."""
    return labels[:MAX_CLASS_LABELS] + ((OTHER_CLASS,) if len(labels) > MAX_CLASS_LABELS else ())


@dataclass
class QualityCounts:
    """Running counts over images (see the module docstring); ``*_counts`` are per bucket, not cumulative,
    with one last column for +Inf."""

    classes: tuple[str, ...]  # label values, `class_names`
    threshold: float
    images: int = 0
    no_detection_images: int = 0
    per_image_counts: np.ndarray = field(init=False)  # int64 [C, len(DETECTIONS_PER_IMAGE_BUCKETS) + 1]
    score_counts: np.ndarray = field(init=False)  # int64 [C, len(SCORE_BUCKETS) + 1]
    score_sums: np.ndarray = field(init=False)  # float64 [C]
    detections: np.ndarray = field(init=False)  # int64 [C]
    longer_side_counts: np.ndarray = field(init=False)  # int64 [len(LONGER_SIDE_BUCKETS) + 1]
    longer_side_sum: float = 0.0

    def __post_init__(self) -> None:
        c = len(self.classes)
        self.per_image_counts = np.zeros((c, len(DETECTIONS_PER_IMAGE_BUCKETS) + 1), dtype=np.int64)
        self.score_counts = np.zeros((c, len(SCORE_BUCKETS) + 1), dtype=np.int64)
        self.score_sums = np.zeros(c, dtype=np.float64)
        self.detections = np.zeros(c, dtype=np.int64)
        self.longer_side_counts = np.zeros(len(LONGER_SIDE_BUCKETS) + 1, dtype=np.int64)

    def add_image(self, scores: np.ndarray, classes: np.ndarray, width: int, height: int) -> None:
        """One image: its detections' ``scores`` [N] and label indices ``classes`` [N] (any threshold;
        those below `threshold` are ignored) and its original size."""
        keep = np.asarray(scores) >= self.threshold
        kept_scores = np.asarray(scores, dtype=np.float64)[keep]
        kept = np.minimum(np.asarray(classes, dtype=np.int64)[keep], len(self.classes) - 1)
        c = len(self.classes)
        per_class = np.bincount(kept, minlength=c)[:c]
        self.images += 1
        self.no_detection_images += int(kept.size == 0)
        bucket = np.searchsorted(DETECTIONS_PER_IMAGE_BUCKETS, per_class, side="left")
        self.per_image_counts[np.arange(c), bucket] += 1
        np.add.at(self.score_counts, (kept, np.searchsorted(SCORE_BUCKETS, kept_scores, side="left")), 1)
        self.score_sums += np.bincount(kept, weights=kept_scores, minlength=c)[:c]
        self.detections += per_class
        side = max(width, height)
        self.longer_side_counts[int(np.searchsorted(LONGER_SIDE_BUCKETS, side, side="left"))] += 1
        self.longer_side_sum += side

    def baseline(self, dataset: str, split: str, runtime: str) -> QualityBaseline:
        """These counts as the manifest records them."""
        images = max(self.images, 1)
        return QualityBaseline(
            dataset=dataset,
            split=split,
            runtime=runtime,
            images=self.images,
            display_threshold=self.threshold,
            no_detection_images=self.no_detection_images,
            no_detection_share=self.no_detection_images / images,
            longer_side_counts=tuple(int(v) for v in self.longer_side_counts),
            classes=tuple(
                ClassQuality(
                    name=name,
                    detections=int(self.detections[i]),
                    detections_per_image=float(self.detections[i]) / images,
                    mean_score=float(self.score_sums[i] / self.detections[i]) if self.detections[i] else None,
                    detections_per_image_counts=tuple(int(v) for v in self.per_image_counts[i]),
                    score_counts=tuple(int(v) for v in self.score_counts[i]),
                )
                for i, name in enumerate(self.classes)
            ),
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClassQuality(_Strict):
    """One class on the baseline split; ``*_counts`` per bucket of the module's bucket bounds, plus +Inf."""

    name: str
    detections: int = Field(ge=0)
    detections_per_image: float = Field(ge=0.0)
    mean_score: float | None = None  # None: no detection of this class
    detections_per_image_counts: tuple[int, ...]
    score_counts: tuple[int, ...]


class QualityBaseline(_Strict):
    """The quality statistics (module docstring) of the artifact as served, on a validation split."""

    dataset: str
    split: str
    runtime: str
    images: int = Field(ge=0)
    display_threshold: float = Field(ge=0.0, le=1.0)
    no_detection_images: int = Field(ge=0)
    no_detection_share: float = Field(ge=0.0, le=1.0)
    score_buckets: tuple[float, ...] = SCORE_BUCKETS
    detections_per_image_buckets: tuple[int, ...] = DETECTIONS_PER_IMAGE_BUCKETS
    longer_side_buckets: tuple[int, ...] = LONGER_SIDE_BUCKETS
    longer_side_counts: tuple[int, ...]
    classes: tuple[ClassQuality, ...]
    measured_at: str | None = None

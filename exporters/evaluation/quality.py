"""The manifest's ``quality`` baseline from an evaluation's served detections (no second inference).

`exporters.evaluation.served_eval.served_metrics` keeps every image's detections as served (COCO results,
scores above the artifact's ``score_threshold``); `ServedDetections.quality` counts them with
`contract.quality.QualityCounts`, the counting the service's detect_quality_* metrics use, at the display
threshold the artifact is served with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.quality import QualityBaseline, QualityCounts, class_names
from exporters.artifact import utc_now


@dataclass(frozen=True)
class ImageDetections:
    """One evaluated image: its detections' scores and label indices, and its (width, height)."""

    scores: np.ndarray  # float [N]
    classes: np.ndarray  # int [N], index into the manifest's labels
    size: tuple[int, int]


@dataclass(frozen=True)
class ServedDetections:
    """Every evaluated image's detections, in image-id order, and where they were measured."""

    images: tuple[ImageDetections, ...]
    labels: tuple[str, ...]
    dataset: str
    split: str
    runtime: str

    @classmethod
    def from_results(
        cls,
        results: list[dict[str, Any]],
        image_sizes: dict[int, tuple[int, int]],
        category_ids: list[int],
        labels: tuple[str, ...],
        where: tuple[str, str, str],
    ) -> ServedDetections:
        """From COCO ``results`` of the images ``image_sizes`` names (id -> width, height); ``category_ids``
        [i] is label i's category; ``where`` is (dataset, split, runtime)."""
        index = {category: i for i, category in enumerate(category_ids)}
        by_image: dict[int, list[tuple[float, int]]] = {i: [] for i in image_sizes}
        for r in results:
            by_image.setdefault(int(r["image_id"]), []).append(
                (float(r["score"]), index[int(r["category_id"])])
            )
        images = tuple(
            ImageDetections(
                np.array([s for s, _ in by_image[i]], dtype=np.float64),
                np.array([c for _, c in by_image[i]], dtype=np.int64),
                image_sizes[i],
            )
            for i in sorted(image_sizes)
        )
        return cls(images, labels, *where)

    def quality(self, threshold: float) -> QualityBaseline:
        """The quality statistics at ``threshold`` (the display threshold the artifact is served with)."""
        counts = QualityCounts(class_names(self.labels), threshold)
        for image in self.images:
            counts.add_image(image.scores, image.classes, *image.size)
        baseline = counts.baseline(self.dataset, self.split, self.runtime)
        return baseline.model_copy(update={"measured_at": utc_now()})

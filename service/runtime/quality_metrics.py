"""The detect_quality_* metrics: what each model outputs live, beside its manifest's baseline.

Counted as `contract.quality` defines them (detections at or above the model's display threshold, before
the request's own filters) and exposed by a custom collector from numpy counts, so observing an image
costs a few vectorized operations whatever its number of detections:

- ``detect_quality_images_total{model}`` and ``detect_quality_no_detection_images_total{model}``: the
  share of images with no detection is their ratio of rates;
- ``detect_quality_detections_per_image{model,class}``: histogram, one observation per image and class
  (zero included), so ``_sum / _count`` is the mean per image;
- ``detect_quality_score{model,class}``: histogram of those detections' scores;
- ``detect_quality_image_longer_side_pixels{model}``: histogram of the images' longer side;
- from the manifest's ``quality`` block, when it has one: ``detect_quality_baseline_no_detection_share
  {model}``, ``detect_quality_baseline_detections_per_image{model,class}``,
  ``detect_quality_baseline_mean_score{model,class}``.

Classes: the manifest's first `contract.quality.MAX_CLASS_LABELS` labels, then ``other``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from contract.manifest import Manifest
from contract.quality import (
    DETECTIONS_PER_IMAGE_BUCKETS,
    LONGER_SIDE_BUCKETS,
    SCORE_BUCKETS,
    QualityBaseline,
    QualityCounts,
    class_names,
)


class QualityMetrics(Collector):
    """Per model: its running `QualityCounts` and its manifest's baseline, exposed at each scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, QualityCounts] = {}
        self._baselines: dict[str, QualityBaseline] = {}

    def track(self, model: str, manifest: Manifest) -> None:
        """Count ``model`` with ``manifest``'s classes and display threshold (counts restart when a version
        with other classes or another threshold loads) and expose its baseline, if it has one."""
        classes = class_names(tuple(label.name for label in manifest.labels))
        with self._lock:
            old = self._counts.get(model)
            if old is None or old.classes != classes or old.threshold != manifest.default_threshold:
                self._counts[model] = QualityCounts(classes, manifest.default_threshold)
            if manifest.quality is not None:
                self._baselines[model] = manifest.quality
            else:
                self._baselines.pop(model, None)

    def observe(self, model: str, scores: np.ndarray, classes: np.ndarray, width: int, height: int) -> None:
        """One image's detections (any threshold: those under the display threshold are not counted)."""
        with self._lock:
            counts = self._counts.get(model)
            if counts is not None:
                counts.add_image(scores, classes, width, height)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snapshot = {m: _copy(c) for m, c in self._counts.items()}
            baselines = dict(self._baselines)
        images = CounterMetricFamily(
            "detect_quality_images", "Images whose detections were counted", labels=["model"]
        )
        empty = CounterMetricFamily(
            "detect_quality_no_detection_images",
            "Images with no detection at or above the model's display threshold",
            labels=["model"],
        )
        per_image = HistogramMetricFamily(
            "detect_quality_detections_per_image",
            "Detections per image at or above the display threshold, per class (zero included)",
            labels=["model", "class"],
        )
        scores = HistogramMetricFamily(
            "detect_quality_score",
            "Scores of the detections at or above the display threshold",
            labels=["model", "class"],
        )
        sides = HistogramMetricFamily(
            "detect_quality_image_longer_side_pixels", "Longer side of the images", labels=["model"]
        )
        for model, c in snapshot.items():
            images.add_metric([model], c.images)
            empty.add_metric([model], c.no_detection_images)
            sides.add_metric([model], _buckets(LONGER_SIDE_BUCKETS, c.longer_side_counts), c.longer_side_sum)
            for i, name in enumerate(c.classes):
                per_image.add_metric(
                    [model, name],
                    _buckets(DETECTIONS_PER_IMAGE_BUCKETS, c.per_image_counts[i]),
                    float(c.detections[i]),
                )
                scores.add_metric([model, name], _buckets(SCORE_BUCKETS, c.score_counts[i]), c.score_sums[i])
        yield from (images, empty, per_image, scores, sides)
        yield from _baseline_gauges(baselines)

    def describe(self) -> Iterator[Metric]:
        return iter(())


def _baseline_gauges(baselines: dict[str, QualityBaseline]) -> Iterator[Metric]:
    share = GaugeMetricFamily(
        "detect_quality_baseline_no_detection_share",
        "Share of validation images with no detection at or above the display threshold (the manifest's)",
        labels=["model"],
    )
    per_image = GaugeMetricFamily(
        "detect_quality_baseline_detections_per_image",
        "Mean detections per validation image at or above the display threshold, per class",
        labels=["model", "class"],
    )
    mean_score = GaugeMetricFamily(
        "detect_quality_baseline_mean_score",
        "Mean score of those detections on the validation split, per class (absent: none)",
        labels=["model", "class"],
    )
    for model, baseline in baselines.items():
        share.add_metric([model], baseline.no_detection_share)
        for cls in baseline.classes:
            per_image.add_metric([model, cls.name], cls.detections_per_image)
            if cls.mean_score is not None:
                mean_score.add_metric([model, cls.name], cls.mean_score)
    yield from (share, per_image, mean_score)


def _buckets(bounds: tuple[float, ...], counts: np.ndarray) -> list[tuple[str, float]]:
    """Per-bucket counts -> Prometheus's cumulative ``(le, count)`` pairs, +Inf last."""
    cumulative = np.cumsum(counts)
    return [(str(float(b)), float(v)) for b, v in zip(bounds, cumulative[:-1], strict=True)] + [
        ("+Inf", float(cumulative[-1]))
    ]


def _copy(counts: QualityCounts) -> QualityCounts:
    copy = QualityCounts(counts.classes, counts.threshold, counts.images, counts.no_detection_images)
    copy.per_image_counts = counts.per_image_counts.copy()
    copy.score_counts = counts.score_counts.copy()
    copy.score_sums = counts.score_sums.copy()
    copy.detections = counts.detections.copy()
    copy.longer_side_counts = counts.longer_side_counts.copy()
    copy.longer_side_sum = counts.longer_side_sum
    return copy

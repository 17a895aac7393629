"""One request's time per stage, for its ``Server-Timing`` response header.

The stages are the ones the Prometheus histograms measure (`service.runtime.metrics.STAGES`): decode,
preprocess, queue_wait, inference, postprocess, encode (JSON) or render (boxed image); ``total`` is
from arrival to the response. Per-image stages are summed over a request's images; queue_wait and
inference, which its images spend together in batches, are the longest image's.
"""

from __future__ import annotations

from service.runtime.metrics import STAGES, ModelMetrics


class RequestStages:
    """Records each stage into the model's histograms and into this request's totals."""

    def __init__(self, metrics: ModelMetrics):
        self._metrics = metrics
        self.seconds: dict[str, float] = {}

    def stage(self, stage: str, seconds: float) -> None:
        """A per-image stage: observed in the histogram, summed for the request."""
        self._metrics.stage(stage, seconds)
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    def longest(self, stage: str, seconds: float) -> None:
        """A stage the batcher already observed (queue_wait, inference): the request keeps its longest."""
        self.seconds[stage] = max(self.seconds.get(stage, 0.0), seconds)

    def server_timing(self, total_s: float | None = None) -> str:
        """``decode;dur=1.234, ...`` (milliseconds), stages in pipeline order, then ``total``."""
        entries = [
            f"{stage};dur={self.seconds[stage] * 1000:.3f}" for stage in STAGES if stage in self.seconds
        ]
        if total_s is not None:
            entries.append(f"total;dur={total_s * 1000:.3f}")
        return ", ".join(entries)

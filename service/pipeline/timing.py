"""One request's time per stage: its ``Server-Timing`` response header, and its trace's stage spans.

The stages are the ones the Prometheus histograms measure (`service.runtime.metrics.STAGES`): decode,
preprocess, queue_wait, inference, postprocess, encode (JSON) or render (boxed image); ``total`` is
from arrival to the response. Per-image stages are summed over a request's images; queue_wait and
inference, which its images spend together in batches, are the longest image's. With tracing on
(`service.runtime.tracing`), every stage of every image is also a span under the request's span, and each
inference span links to the span of the batch it ran in.
"""

from __future__ import annotations

import time

from opentelemetry.trace import Span

from service.runtime import tracing
from service.runtime.batching.batch_worker import ItemTimes
from service.runtime.metrics import STAGES, ModelMetrics


class RequestStages:
    """Records each stage into the model's histograms, this request's totals and its trace."""

    def __init__(self, metrics: ModelMetrics, span: Span | None = None):
        self._metrics = metrics
        self._span = span
        self._tracing = tracing.current()
        self.seconds: dict[str, float] = {}

    def stage(self, stage: str, seconds: float, ended: float | None = None) -> None:
        """A per-image stage that ended at ``ended`` (`time.perf_counter`; None: now), observed in the
        histogram, summed for the request, and traced."""
        self._metrics.stage(stage, seconds)
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        if self._span is not None:
            end = tracing.from_perf_counter(time.perf_counter() if ended is None else ended)
            self._tracing.stage(self._span, stage, end - int(seconds * 1e9), end)

    def batched(self, times: ItemTimes) -> None:
        """One image's queue wait and inference, which the batcher already observed: the request keeps
        the longest of its images'; each is traced, inference linked to its batch."""
        for stage, seconds in (("queue_wait", times.queue_wait), ("inference", times.inference)):
            if seconds is not None:
                self.seconds[stage] = max(self.seconds.get(stage, 0.0), seconds)
        if self._span is None or times.batch_started is None:
            return
        started = tracing.from_monotonic(times.batch_started)
        if times.queue_wait is not None:
            self._tracing.stage(self._span, "queue_wait", started - int(times.queue_wait * 1e9), started)
        if times.inference is not None:
            links = [times.batch_span] if times.batch_span is not None else []
            ended = tracing.from_monotonic(times.batch_started + times.inference)
            self._tracing.stage(self._span, "inference", started, ended, links)

    def span(self, name: str, started: float, ended: float) -> None:
        """A traced step that is not a histogram stage (reading the body), `time.perf_counter` times."""
        if self._span is not None:
            self._tracing.stage(
                self._span, name, tracing.from_perf_counter(started), tracing.from_perf_counter(ended)
            )

    def server_timing(self, total_s: float | None = None) -> str:
        """``decode;dur=1.234, ...`` (milliseconds), stages in pipeline order, then ``total``."""
        entries = [
            f"{stage};dur={self.seconds[stage] * 1000:.3f}" for stage in STAGES if stage in self.seconds
        ]
        if total_s is not None:
            entries.append(f"total;dur={total_s * 1000:.3f}")
        return ", ".join(entries)

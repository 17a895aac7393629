"""How long a new request would wait: batch time as a function of batch size, fitted on recent batches.

Batch time is modelled as ``a * n + b`` (per-image cost plus fixed overhead), least squares over the
last `HISTORY` batches, as BentoML's adaptive batcher does. With one batch size seen so far the model is
proportional (``t * n / size``); with none, nothing is known and nothing is predicted.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

HISTORY = 50


class BatchTimeModel:
    """Recent (batch size, seconds) observations and the fitted batch time."""

    def __init__(self, history: int = HISTORY):
        self._observed: deque[tuple[int, float]] = deque(maxlen=history)
        self._coefficients: tuple[float, float] | None = None

    def observe(self, size: int, seconds: float) -> None:
        self._observed.append((size, seconds))
        sizes = np.array([s for s, _ in self._observed], dtype=np.float64)
        times = np.array([t for _, t in self._observed], dtype=np.float64)
        if len(np.unique(sizes)) >= 2:
            a, b = np.polyfit(sizes, times, 1)
            if a > 0:  # a fit where bigger batches are faster is noise: fall back to proportional
                self._coefficients = (float(a), max(0.0, float(b)))
                return
        self._coefficients = (float(times.sum() / sizes.sum()), 0.0)

    @property
    def known(self) -> bool:
        return self._coefficients is not None

    def seconds(self, size: int) -> float:
        """Predicted time of a batch of ``size`` (0 while nothing has been observed)."""
        if self._coefficients is None or size <= 0:
            return 0.0
        a, b = self._coefficients
        return a * size + b


def expected_finish_s(
    model: BatchTimeModel,
    *,
    queued: int,
    images: int,
    max_batch_size: int,
    running_size: int,
    running_for_s: float,
) -> float:
    """Seconds until a request of ``images`` joining behind ``queued`` waiting images is done.

    The batch in progress (``running_size`` images, ``running_for_s`` in) finishes first; then the
    queue runs in full batches; the request's last image is in batch ``(queued + images - 1) //
    max_batch_size`` after that one.
    """
    remaining = max(0.0, model.seconds(running_size) - running_for_s) if running_size else 0.0
    last = queued + images - 1
    batches_before = last // max_batch_size
    own_batch = min(max_batch_size, last + 1 - batches_before * max_batch_size)
    return remaining + batches_before * model.seconds(max_batch_size) + model.seconds(own_batch)


def retry_after_s(finish_s: float, budget_s: float) -> float:
    """When a request sent later could finish within ``budget_s``, if nothing new arrives meanwhile."""
    return max(1.0, math.ceil(finish_s - budget_s))

"""How long a new request would wait: batch time as a function of batch size, fitted on recent batches.

Batch time is modelled as ``a * n + b`` (per-image cost plus fixed overhead), least squares over the
last `HISTORY` batches (and the batches the model's warmup timed, for sizes not among them:
`BatchTimeModel.seed`), as BentoML's adaptive batcher does. With one batch size seen so far the model is
proportional (``t * n / size``); with none, nothing is known and nothing is predicted.

`BatchTimeModel.size_seconds` is the time measured for one batch size (a moving average per size), for
runtimes whose batch time is not linear in the size: OpenVINO runs a batch of one on a graph compiled for
that shape and the other sizes on the dynamic graph, so a batch of two can cost more than two of one.
"""

from __future__ import annotations

import math
from collections import deque

HISTORY = 50
# The per-size averages follow the last ~this many batches of that size (exponential moving average),
# and stand for that size once it has run this many times (the linear fit before).
SIZE_SMOOTHING = 9
SIZE_MIN_RUNS = 3


class BatchTimeModel:
    """Recent (batch size, seconds) observations and the fitted batch time."""

    def __init__(self, history: int = HISTORY):
        self._observed: deque[tuple[int, float]] = deque(maxlen=history)
        # Running sums over ``_observed`` (n, x, y, xx, xy) and its batches per size, so a batch costs the
        # event loop O(1), not a pass over the history; recomputed in full every ``history`` batches.
        self._sums = [0.0] * 5
        self._served: dict[int, int] = {}
        self._until_resum = self._observed.maxlen or 1
        self._seeds: list[tuple[int, float]] = []  # measured before serving: always in the fit
        self._seed_by_size: dict[int, float] = {}
        self._coefficients: tuple[float, float] | None = None
        self._spread_seen = False
        self._by_size: dict[int, float] = {}
        self._runs: dict[int, int] = {}
        self._size_alpha = 2.0 / (SIZE_SMOOTHING + 1)

    def observe(self, size: int, seconds: float) -> None:
        # Runs on the event loop once per batch: closed-form least squares in plain floats, from running
        # sums (numpy's polyfit and unique cost ~20x more than a pass over 50 points, itself ~10x this).
        if len(self._observed) == self._observed.maxlen:
            self._account(*self._observed[0], sign=-1.0)
        self._observed.append((size, seconds))
        self._account(size, seconds, sign=1.0)
        self._until_resum -= 1
        if self._until_resum <= 0:  # float sums drift a little with every subtraction: start them afresh
            self._until_resum = self._observed.maxlen or 1
            self._sums = [0.0] * 5
            self._served = {}
            for x, y in self._observed:
                self._account(x, y, sign=1.0)
        last = self._by_size.get(size)
        self._by_size[size] = seconds if last is None else last + self._size_alpha * (seconds - last)
        self._runs[size] = self._runs.get(size, 0) + 1
        self._fit()

    def _account(self, x: int, y: float, sign: float) -> None:
        sums = self._sums
        sums[0] += sign
        sums[1] += sign * x
        sums[2] += sign * y
        sums[3] += sign * x * x
        sums[4] += sign * x * y
        count = self._served.get(x, 0) + int(sign)
        if count:
            self._served[x] = count
        else:
            del self._served[x]

    def _fit(self) -> None:
        n, sum_x, sum_y, sum_xx, sum_xy = self._sums
        for x, y in self._seeds:  # a seed stands for its size while no served batch of that size is known
            if x not in self._served:
                n += 1
                sum_x += x
                sum_y += y
                sum_xx += x * x
                sum_xy += x * y
        spread = n * sum_xx - sum_x * sum_x  # > 0 exactly when two sizes differ
        self._spread_seen = spread > 0
        if spread > 0:
            a = (n * sum_xy - sum_x * sum_y) / spread
            if a > 0:  # a fit where bigger batches are faster is noise: fall back to proportional
                self._coefficients = (a, max(0.0, (sum_y - a * sum_x) / n))
                return
        self._coefficients = (sum_y / sum_x, 0.0)

    def seed(self, seconds: dict[int, float]) -> None:
        """Batch times measured before serving (the model's warmup: each size alone, on black images). Each
        stands in the linear fit for its size while no served batch of that size is in the history, so the
        fit knows a per-batch cost from the start and after any run of single requests. A seeded size
        counts as `measured` (its seed its time) until it has served `SIZE_MIN_RUNS` batches of its own:
        served batches, whose images are real and whose runtime shares the cores with the rest of the
        service, cost more, and their moving average then replaces the seed."""
        self._seeds = sorted(seconds.items())
        self._seed_by_size = dict(seconds)
        if self._seeds:
            self._fit()

    @property
    def known(self) -> bool:
        return self._coefficients is not None

    @property
    def fitted(self) -> bool:
        """Whether the fit has seen two batch sizes (before that, ``b`` is 0 by assumption, not measure)."""
        return self._coefficients is not None and self._spread_seen

    def seconds(self, size: int) -> float:
        """Predicted time of a batch of ``size`` (0 while nothing has been observed)."""
        if self._coefficients is None or size <= 0:
            return 0.0
        a, b = self._coefficients
        return a * size + b

    def measured(self, size: int) -> bool:
        """Whether ``size`` has a time of its own for `size_seconds`: it has run often enough
        (`SIZE_MIN_RUNS`), or the warmup timed it (`seed`)."""
        return self._runs.get(size, 0) >= SIZE_MIN_RUNS or size in self._seed_by_size

    def seeded(self, size: int) -> float | None:
        """The warmup's time for ``size`` (`seed`), or None."""
        return self._seed_by_size.get(size)

    def size_seconds(self, size: int) -> float:
        """Time of a batch of ``size`` as measured for that size lately; before it has run
        `SIZE_MIN_RUNS` times, its warmup time (`seed`), else the linear fit."""
        if self._runs.get(size, 0) >= SIZE_MIN_RUNS:
            return self._by_size[size]
        return self._seed_by_size.get(size, self.seconds(size))


def expected_finish_s(
    model: BatchTimeModel,
    *,
    queued: int,
    images: int,
    max_batch_size: int,
    running_size: int,
    running_for_s: float,
    workers: int = 1,
) -> float:
    """Seconds until a request of ``images`` joining behind ``queued`` waiting images is done.

    The batch in progress (``running_size`` images, ``running_for_s`` in; with several ``workers``, the
    one that frees first) finishes first; then the queue runs in full batches, ``workers`` at a time; the
    request's last image is in batch ``(queued + images - 1) // max_batch_size`` after that one.
    """
    remaining = max(0.0, model.seconds(running_size) - running_for_s) if running_size else 0.0
    last = queued + images - 1
    batches_before = last // max_batch_size
    own_batch = min(max_batch_size, last + 1 - batches_before * max_batch_size)
    rounds_before = batches_before // max(1, workers)
    return remaining + rounds_before * model.seconds(max_batch_size) + model.seconds(own_batch)


def retry_after_s(finish_s: float, budget_s: float) -> float:
    """When a request sent later could finish within ``budget_s``, if nothing new arrives meanwhile."""
    return max(1.0, math.ceil(finish_s - budget_s))

"""A queueing model of the server scenario: what p99 a server whose batches cost ``a + b n`` milliseconds can
keep under Poisson arrivals, and the highest rate that keeps it within a bound.

The model is the service's batching as `service.runtime.batching` runs it by default (``fixed`` policy with
idle dispatch): one inference worker; when it is free it takes every request that has arrived, up to
``max_batch``, and starts at once (a lone request starts alone); requests arriving meanwhile wait for the
next batch. A batch of ``n`` occupies the worker ``a + b n`` ms, and everything a request costs besides
inference (decode, HTTP, JSON) is folded into ``a`` and ``b``: fitted from a server's own closed-loop
throughput at batch 1 and at full batches, they include it; fitted from the raw pipeline's (decode to JSON
in one thread), they describe a server with no cost of its own. Arrivals are `poisson_schedule`'s, the same
seeded process `detect-bench http --arrival poisson` sends.

What it leaves out: requests' costs overlapping each other on spare cores (a gain), and the machine's
noise and the server's pauses (a loss). docs/cpu-inference.md compares its predictions with measured runs.

The cost may also be `SizeCosts`, the time measured per batch size (OpenVINO runs a batch of one on its own
static graph, so a batch of two can cost more than two of one), and the worker may take fewer than all
waiting requests: ``dispatch(waiting, rate) -> n`` (e.g. the ``adaptive`` batching policy's
`service.runtime.batching.batch_close.dispatch_size`); `DISPATCH` names the service's policies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from bench.load.open_loop import DEFAULT_SEED, poisson_schedule


@dataclass(frozen=True)
class BatchCost:
    """A batch of ``n`` requests keeps the worker ``fixed_ms + per_request_ms * n`` milliseconds."""

    fixed_ms: float
    per_request_ms: float

    def __post_init__(self) -> None:
        if self.fixed_ms < 0 or self.per_request_ms <= 0:
            raise ValueError(f"need fixed_ms >= 0 and per_request_ms > 0, got {self}")

    def ms(self, n: int) -> float:
        return self.fixed_ms + self.per_request_ms * n

    @classmethod
    def from_throughput(cls, images_per_s: Mapping[int, float]) -> BatchCost:
        """Least-squares line through the batch times ``n / images_per_s[n]`` (at least two batch sizes):
        e.g. a closed loop's throughput at concurrency 1 (batches of 1) and at full batches."""
        if len(images_per_s) < 2 or any(n < 1 or not r > 0 for n, r in images_per_s.items()):
            raise ValueError(
                f"need throughputs > 0 at two or more batch sizes >= 1, got {dict(images_per_s)}"
            )
        sizes = np.array(sorted(images_per_s), dtype=float)
        batch_ms = np.array([1000.0 * n / images_per_s[int(n)] for n in sizes])
        per_request, fixed = np.polyfit(sizes, batch_ms, 1)
        # Batches that cost less per image the larger they grow beyond linear would give a negative fixed
        # cost: the line is then held at no fixed cost.
        return cls(max(float(fixed), 0.0), float(per_request))


@dataclass(frozen=True)
class SizeCosts:
    """A batch of ``n`` keeps the worker ``batch_ms[n]`` milliseconds; sizes between two given ones are
    interpolated linearly, sizes past the largest extrapolated along the last two."""

    batch_ms: Mapping[int, float]

    def __post_init__(self) -> None:
        if len(self.batch_ms) < 2 or 1 not in self.batch_ms or any(v <= 0 for v in self.batch_ms.values()):
            raise ValueError(f"need batch 1 and one more size, all > 0 ms, got {dict(self.batch_ms)}")

    def ms(self, n: int) -> float:
        sizes = sorted(self.batch_ms)
        if n in self.batch_ms:
            return float(self.batch_ms[n])
        below = max((s for s in sizes if s < n), default=sizes[0])
        above = min((s for s in sizes if s > n), default=None)
        if above is None:  # past the largest: along the last two sizes
            below, above = sizes[-2], sizes[-1]
        slope = (self.batch_ms[above] - self.batch_ms[below]) / (above - below)
        return float(self.batch_ms[below] + slope * (n - below))


Cost = BatchCost | SizeCosts
# (requests waiting when the worker frees, arrival rate per second) -> how many start now.
Dispatch = Callable[[int, float], int]


def _all(waiting: int, rate: float) -> int:
    return waiting


def _one(waiting: int, rate: float) -> int:
    return min(waiting, 1)


def adaptive_dispatch(cost: Cost, max_batch: int, longest_ms: float = math.inf) -> Dispatch:
    """The ``adaptive`` policy's rule (`service.runtime.batching.batch_close.dispatch_size`) on ``cost``,
    with the arrival rate known exactly; ``longest_ms``: its bound on a batch's time."""
    from service.runtime.batching.batch_close import dispatch_size

    def seconds(n: int) -> float:
        return cost.ms(n) / 1000.0

    return lambda waiting, rate: dispatch_size(
        waiting, seconds, rate=rate, max_batch_size=max_batch, longest_s=longest_ms / 1000.0
    )


# The service's policies as dispatch rules: "fixed" takes everything waiting (up to max_batch), "adaptive"
# its share, "none" one at a time (max_batch_size 1).
DISPATCH: dict[str, Callable[[Cost, int], Dispatch]] = {
    "fixed": lambda cost, max_batch: _all,
    "adaptive": adaptive_dispatch,
    "none": lambda cost, max_batch: _one,
}


@dataclass(frozen=True)
class Predicted:
    rate: float
    requests: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    mean_batch: float


def simulate(
    rate: float,
    cost: Cost,
    max_batch: int = 8,
    requests: int = 100_000,
    seed: int = DEFAULT_SEED,
    dispatch: Dispatch = _all,
) -> Predicted:
    """Latency (arrival to answer) of ``requests`` Poisson arrivals at ``rate`` per second."""
    if max_batch < 1 or requests < 1:
        raise ValueError(f"need max_batch >= 1 and requests >= 1, got {max_batch} and {requests}")
    arrivals = poisson_schedule(rate, requests / rate, seed) * 1000.0
    count = len(arrivals)
    latency = np.empty(count)
    batches = 0
    free_at = 0.0
    first = 0
    while first < count:
        start = max(free_at, arrivals[first])
        # Everything that has arrived by the start, up to max_batch (arrivals are sorted); the rule's share.
        waiting = min(int(np.searchsorted(arrivals, start, side="right")), first + max_batch) - first
        last = first + max(1, min(waiting, dispatch(waiting, rate)))
        free_at = start + cost.ms(last - first)
        latency[first:last] = free_at - arrivals[first:last]
        batches += 1
        first = last
    p50, p90, p99 = np.percentile(latency, [50, 90, 99])
    return Predicted(rate, count, float(p50), float(p90), float(p99), float(latency.mean()), count / batches)


def highest_rate(
    cost: Cost,
    bound_ms: float,
    max_batch: int = 8,
    requests: int = 100_000,
    seed: int = DEFAULT_SEED,
    steps: int = 14,
    dispatch: Dispatch = _all,
) -> float:
    """The highest rate (to ~1e-4 of the worker's capacity) whose predicted p99 is within ``bound_ms``;
    0.0 when even a lone request takes longer than the bound."""
    if cost.ms(1) > bound_ms:
        return 0.0
    # Above capacity the queue grows without end.
    low, high = 0.0, max(1000.0 * n / cost.ms(n) for n in range(1, max_batch + 1))
    for _ in range(steps):
        middle = (low + high) / 2
        if simulate(middle, cost, max_batch, requests, seed, dispatch).p99_ms <= bound_ms:
            low = middle
        else:
            high = middle
    return low

"""When a batch closes under the ``latency`` batching policy: a pure decision from the fitted batch-time
model (`service.runtime.batching.wait_estimate.BatchTimeModel`), the arrival rate and each request's budget.

A request's budget ends at ``enqueued + latency budget`` (``DETECT_BATCH_LATENCY_BUDGET_MS``) or at its
deadline, whichever is first. The decision, for the batch being formed:

- **full**: it holds ``max_batch_size`` requests.
- **deadline**: a request would otherwise miss the time by which it must start.
- **budget**: the batch as it is keeps its oldest request within budget (the running batch's remaining
  time plus this batch's predicted time), one more request would not, and the batch is at least as large
  as the arrival rate needs (the smallest size whose throughput ``n / t(n)`` keeps up with it): the batch
  stops growing and runs as soon as the worker is free. This sizes batches per model and per moment.
  A budget already lost is not defended: capping batches then would only lower throughput and lengthen
  the queue behind them, so the batch grows as under the fixed policy.
- **idle**: the worker is idle and waiting for the next expected arrival (``1 / rate``) does not lower the
  summed completion time of the requests involved (this batch now and the next request after it, against
  all of them together later), or the wait would run past the oldest request's budget.

Otherwise the batch waits; `wait_s` says how long before the decision is worth taking again.

The ``adaptive`` policy closes a batch as ``fixed`` does, and then the free worker takes only as much of it
as pays (`dispatch_size`): from the time each batch size measured lately, the first batch of the split of
the waiting requests that minimises their summed completion time while single requests keep up with the
arrival rate (with `KEEP_UP_HEADROOM`), else at least the waiting size that serves the most per second.
At low load that runs requests one by one, as a server without batching does, wherever a batch costs as
much as its images run alone (on OpenVINO a batch of two can cost more: see
`service.runtime.batching.wait_estimate`); a size is used only once it has run often enough to be measured
(the linear fit predicts every size beyond one cheaper per image, which a runtime with a graph per batch
size belies; the warmup measures a batch of one and a full one); once the arrivals outpace single requests,
batches grow to the size that serves the most, and sizes not yet run are tried only once a full batch
waits and the arrival rate is above what single requests serve.

Under any policy, a model with several batch workers (`service.runtime.batching.worker_pool`) asks
`pool_share` how much of a closed batch the free worker takes, the rest waiting for the next free one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# The arrival-rate estimate follows the last ~this many gaps (exponential moving average).
RATE_SMOOTHING = 16
# The adaptive policy sizes batches for this multiple of the arrival rate, so the worker stays below ~80%
# busy and a burst drains instead of queueing behind batches that only just keep up.
KEEP_UP_HEADROOM = 1.25
# The adaptive policy batches only with sizes whose measured time per image is at least this much below a
# single request's: a batch that gains less (on a CPU, often none) only makes its requests wait for it.
BATCH_GAIN_MARGIN = 0.1
# The adaptive policy runs batches that take at most this share of the latency budget
# (DETECT_BATCH_LATENCY_BUDGET_MS) while those keep up with this multiple of the arrival rate (`within`).
LONGEST_BATCH_SHARE = 0.25
BOUNDED_HEADROOM = 1.2


@dataclass(frozen=True)
class BatchState:
    """What the decision sees of the batch being formed and of the worker (times in seconds, monotonic)."""

    size: int
    max_batch_size: int
    now: float
    oldest_budget_end: float  # min(enqueued + latency budget, deadline) of the batch's oldest request
    earliest_start_by: float  # the earliest time by which one of its requests must start (deadline - margin)
    worker_idle: bool
    worker_remaining_s: float  # predicted time left of the batch running now (0 when idle)
    arrival_rate: float  # requests per second lately (0: unknown)


def close_reason(
    state: BatchState, batch_seconds: Callable[[int], float] | None, *, fitted: bool = True
) -> str | None:
    """Why the batch closes now, or None to keep it open. ``batch_seconds(n)`` is the predicted time of a
    batch of ``n`` (None while nothing is known: the batch then closes whenever the worker is idle).

    ``fitted`` False (the model has seen one batch size only, so its per-batch cost is assumed, not
    measured) turns the budget rule off: a model that believes batching gains nothing would cap batches
    at the one size it has seen and so never learn otherwise."""
    if state.size >= state.max_batch_size:
        return "full"
    if state.now >= state.earliest_start_by:
        return "deadline"
    if batch_seconds is None:
        return "idle" if state.worker_idle else None
    start = state.now + state.worker_remaining_s
    if (
        fitted
        and start + batch_seconds(state.size + 1) > state.oldest_budget_end
        and start + batch_seconds(state.size) <= state.oldest_budget_end
        and state.size >= keep_up_size(state.arrival_rate, state.max_batch_size, batch_seconds)
    ):
        return "budget"
    if not state.worker_idle:
        return None
    gap = 1.0 / state.arrival_rate if state.arrival_rate > 0 else math.inf
    if state.now + gap + batch_seconds(state.size + 1) > state.oldest_budget_end:
        return "idle"
    if not worth_waiting(state.size, gap, batch_seconds):
        return "idle"
    return None


def keep_up_size(rate: float, max_batch_size: int, batch_seconds: Callable[[int], float]) -> int:
    """The smallest batch size whose throughput ``n / t(n)`` keeps up with ``rate``; where none does, the
    smallest that reaches the highest throughput."""
    throughput = [n / max(batch_seconds(n), 1e-9) for n in range(1, max_batch_size + 1)]
    target = min(rate, max(throughput) * (1 - 1e-9))
    return next(n for n, per_s in enumerate(throughput, start=1) if per_s >= target)


def worth_waiting(size: int, gap_s: float, batch_seconds: Callable[[int], float]) -> bool:
    """Whether ``size`` requests waiting ``gap_s`` for one more and running together finish sooner, summed
    over all of them, than running now and the newcomer alone after them."""
    if not math.isfinite(gap_s):
        return False
    now_then_alone = size * batch_seconds(size) + max(batch_seconds(size), gap_s) + batch_seconds(1)
    together = (size + 1) * (gap_s + batch_seconds(size + 1))
    return together < now_then_alone


def wait_s(state: BatchState) -> float | None:
    """How long an open batch may wait before the decision is worth taking again, or None to wait for
    the next event only (a new request, a finished batch, stop() wake the batcher anyway). Only future
    moments count: a budget or a start time already past would make the batcher spin."""
    moments = [state.oldest_budget_end - state.now, state.earliest_start_by - state.now]
    if state.worker_idle and state.arrival_rate > 0:
        moments.append(1.0 / state.arrival_rate)  # the expected next arrival, or the rate has decayed
    ahead = [m for m in moments if 0 < m < math.inf]
    return min(ahead) if ahead else None


class ArrivalRate:
    """Requests per second, from an exponential moving average of the gaps between arrivals."""

    def __init__(self, smoothing: int = RATE_SMOOTHING):
        self._alpha = 2.0 / (smoothing + 1)
        self._gap: float | None = None
        self._last: float | None = None

    def arrived(self, at: float) -> None:
        if self._last is not None:
            gap = max(at - self._last, 0.0)
            self._gap = gap if self._gap is None else self._gap + self._alpha * (gap - self._gap)
        self._last = at

    def rate(self, now: float) -> float:
        """The rate; a silence longer than the average gap lowers it, as if an arrival came now."""
        if self._gap is None or self._last is None:
            return 0.0
        gap = max(self._gap, (now - self._last) * self._alpha + self._gap * (1 - self._alpha))
        return 1.0 / gap if gap > 0 else math.inf


def dispatch_size(
    waiting: int,
    batch_seconds: Callable[[int], float],
    *,
    rate: float,
    max_batch_size: int,
    measured: Callable[[int], bool] | None = None,
    longest_s: float = math.inf,
) -> int:
    """Adaptive policy, one worker: how many of ``waiting`` requests run now.

    While single requests keep up with the arrival rate raised by `KEEP_UP_HEADROOM` (`keep_up_size`):
    every batch delays all the requests still waiting by its time, so running the ``waiting`` requests as
    batches ``k1, k2, ...`` sums to ``waiting * t(k1) + (waiting - k1) * t(k2) + ...``; the first batch of the
    split that minimises this (dynamic programming over the sizes, smaller first on a tie). Once they do
    not, at least the size among those waiting that serves the most requests per second. Either way only
    sizes whose time per image beats a single request's by `BATCH_GAIN_MARGIN` are used, and only sizes
    ``measured`` to, unless single requests have fallen behind by both signs, a full batch waiting and an
    arrival rate above what they serve (either alone misleads: a burst of random arrivals fills the queue
    and doubles the rate estimate for a moment): only then is a size not yet run tried on the fit's
    promise. Sizes whose batch takes longer than ``longest_s`` are used only once the sizes within it
    (single requests included) do not keep up (`within`).
    """
    if waiting <= 1:
        return waiting
    singles_keep_up = rate * KEEP_UP_HEADROOM * batch_seconds(1) <= 1.0
    behind = waiting >= max_batch_size and rate * batch_seconds(1) > 1.0
    cost = within(gainful(batch_seconds, None if behind else measured), longest_s, rate, max_batch_size)
    summed = [0.0] * (waiting + 1)
    first = [0] * (waiting + 1)
    for queued in range(1, waiting + 1):
        summed[queued], first[queued] = min(
            (queued * cost(k) + summed[queued - k], k) for k in range(1, queued + 1)
        )
    if singles_keep_up:
        return first[waiting]
    # Single requests do not keep up: the size among those waiting that serves the most per second.
    fastest = max(range(1, waiting + 1), key=lambda k: (k / max(cost(k), 1e-9), k))
    return max(first[waiting], fastest)


def gainful(
    batch_seconds: Callable[[int], float], measured: Callable[[int], bool] | None = None
) -> Callable[[int], float]:
    """``batch_seconds`` where a size's time per image beats a single request's by `BATCH_GAIN_MARGIN` (with
    ``measured``: and that size has run often enough to be measured, not predicted by the fit), and
    infinite (never worth running) for every other size but 1."""
    single = batch_seconds(1)

    def cost(k: int) -> float:
        if k == 1:
            return batch_seconds(1)
        if measured is not None and not measured(k):
            return math.inf
        seconds = batch_seconds(k)
        return seconds if seconds <= k * single * (1 - BATCH_GAIN_MARGIN) else math.inf

    return cost


def within(
    cost: Callable[[int], float], longest_s: float, rate: float, max_batch_size: int
) -> Callable[[int], float]:
    """``cost`` where a batch takes at most ``longest_s`` (`LONGEST_BATCH_SHARE` of the latency budget) and
    infinite for longer sizes but 1, while the sizes within it (a single request always) serve ``rate``
    with `BOUNDED_HEADROOM`; otherwise ``cost`` unchanged.

    A long batch delays every request that arrives while it runs by up to its own time, so it sets the
    tail latency even where it serves more per second. Under random arrivals short batches (or single
    requests) keep the p99 lowest until the arrivals come close to what they serve; past that the queue
    would grow behind them and the longer, more efficient batches take over
    (`scripts/bench/batch_policy_model.py --longest-ms`, docs/benchmarks/batching.md)."""
    if not math.isfinite(longest_s):
        return cost
    short = bounded(cost, longest_s)
    serves = max(k / max(short(k), 1e-9) for k in range(1, max_batch_size + 1))
    return short if rate * BOUNDED_HEADROOM <= serves else cost


def bounded(cost: Callable[[int], float], longest_s: float) -> Callable[[int], float]:
    """``cost`` for a single request and for batches that take at most ``longest_s``; infinite otherwise."""

    def short(k: int) -> float:
        seconds = cost(k)
        return seconds if k == 1 or seconds <= longest_s else math.inf

    return short


def pool_share(
    waiting: int,
    batch_seconds: Callable[[int], float],
    next_free_s: float,
    *,
    rate_per_worker: float = 0.0,
    max_batch_size: int | None = None,
    gain_margin: bool = False,
    measured: Callable[[int], bool] | None = None,
    longest_s: float = math.inf,
) -> int:
    """How many of ``waiting`` requests a free worker takes now, when another worker of the same model
    frees up in ``next_free_s`` (0: it is free too).

    Taking ``k`` now, they finish at ``t(k)``; the rest start when a worker frees next (the other one, or
    this one after its ``k``) and finish ``t(rest)`` later. The share is the ``k`` that minimises the
    summed completion time, but at least the batch size whose throughput keeps up with each worker's
    share of the arrival rate (`keep_up_size`): where a batch costs little more than its images (a
    single-threaded stream) requests run one by one on whichever worker is free, as if unbatched, until
    the arrivals outpace that, and batches grow only then. With ``gain_margin`` (the adaptive policy) the
    share is 1 or a size that beats single requests by `BATCH_GAIN_MARGIN` (`gainful`), the floor too,
    and only a size ``measured`` to, unless ``max_batch_size`` requests are waiting and the arrivals
    outpace single requests (``rate_per_worker`` without the headroom); and, with ``longest_s``, only
    sizes whose batch takes at most that (`bounded`), at any load: unlike one worker's (`within`), a
    pool's bound never gives way. Several workers drain a queue together, so single requests on them
    hold the p99 close to what they serve (an M/D/2 queue waits far less than an M/D/1 at the same
    load), while a long batch holds one of them long (eight images on one core of a 2-core CPU: ~140 ms
    for the default model); measured, such batches lost to single requests at every load, past
    saturation too (docs/benchmarks/batching.md, "A bound on a batch's time").
    """
    if waiting <= 1:
        return waiting
    cost = batch_seconds
    if gain_margin:  # sizes not yet run only once single requests fell behind (`dispatch_size`)
        full = max_batch_size is not None and waiting >= max_batch_size
        behind = full and rate_per_worker / KEEP_UP_HEADROOM * batch_seconds(1) > 1.0
        cost = bounded(gainful(batch_seconds, None if behind else measured), longest_s)
    sizes = [k for k in range(1, waiting + 1) if math.isfinite(cost(k))]

    def summed(k: int) -> float:
        rest = waiting - k
        own = batch_seconds(k)
        return k * own + (rest * (min(next_free_s, own) + batch_seconds(rest)) if rest else 0.0)

    best = min(sizes, key=lambda k: (summed(k), -k))
    if rate_per_worker > 0:
        floor = keep_up_size(rate_per_worker, max_batch_size or waiting, cost)
        best = max(best, max(k for k in sizes if k <= floor))
    return best


def solo_pays(
    stream_lone_s: float, solo_lone_s: float, solo_s: float, rate: float, held_share: float = 1.0
) -> bool:
    """Whether a lone request runs on the solo graph (one image on every thread) rather than on one idle
    stream of a pool (`service.runtime.batching.worker_pool`, "Solo").

    It saves ``stream_lone_s - solo_lone_s`` (the warmup's times of one image on a stream and on the solo
    graph, alone; what the request does besides inference costs the same on both). Meanwhile the streams
    wait: each request that arrives while it runs (``rate * solo_s`` of them under random arrivals at
    ``rate`` per second, with ``solo_s`` the solo batch's time lately; ``held_share`` of that as measured:
    `HeldUp`) waits ``solo_s / 2`` on average where a free stream would have started it at once, and the
    streams then start behind by as much again. It pays while that loss, ``held_share * rate * solo_s**2``,
    is below the saving: at low load, or whenever the clients wait for their answers (one at a time),
    and never where the solo graph is not the faster one.
    """
    if not 0 < solo_lone_s < stream_lone_s or solo_s <= 0:
        return False
    return held_share * rate * solo_s * solo_s < stream_lone_s - solo_lone_s


class HeldUp:
    """How many requests solo batches hold up, as a share of what random arrivals at the rate they ran at
    would have sent meanwhile (moving averages over solo batches; 1 until one has run). A client that
    sends its next request only once the answer is back never arrives during one (share 0); independent
    clients do about as random arrivals would (share ~1)."""

    def __init__(self, smoothing: int = RATE_SMOOTHING):
        self._alpha = 2.0 / (smoothing + 1)
        self._arrived: float | None = None
        self._expected = 0.0

    def ran(self, arrived: int, expected: float) -> None:
        """A solo batch ended: ``arrived`` requests came while it ran, ``expected`` were due at the rate."""
        if self._arrived is None:
            self._arrived, self._expected = float(arrived), expected
            return
        self._arrived += self._alpha * (arrived - self._arrived)
        self._expected += self._alpha * (expected - self._expected)

    @property
    def share(self) -> float:
        if self._arrived is None or self._expected <= 0:
            return 1.0
        return self._arrived / self._expected

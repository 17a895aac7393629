"""The batch being formed, asked per policy: does it close now, how long may it wait otherwise, and how
much of it the free worker takes (`service.runtime.batching.batcher` asks; the decisions themselves are the
pure functions of `service.runtime.batching.batch_close`).

With ``policy="fixed"`` a batch closes when full, ``max_queue_delay_s`` after its first request, just before
its earliest deadline, or (``dispatch_when_idle``) as soon as the worker is idle; the free worker takes all
of it.

With ``policy="latency"`` the close decision is `service.runtime.batching.batch_close.close_reason`: it uses
the fitted batch-time model, the arrival rate and each request's latency budget (``latency_budget_s`` or its
deadline) to stop a batch from growing past what keeps its oldest request within budget, and to wait for
company only when that lowers the summed completion time. ``max_queue_delay_s`` is then unused.

With ``policy="adaptive"`` batches close as under ``fixed``, and the free worker takes only the share of a
closed batch that pays (`service.runtime.batching.batch_close.dispatch_size`): one by one at low load,
larger batches once the arrivals outpace single requests, and batches longer than a quarter of
``latency_budget_s`` only once the shorter ones fall behind (with several workers never; a batch of
stream frames alone has no such bound).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from service.runtime.batching.batch_close import (
    LONGEST_BATCH_SHARE,
    ArrivalRate,
    BatchState,
    close_reason,
    wait_s,
)
from service.runtime.batching.batch_worker import Pending
from service.runtime.batching.worker_pool import WorkerPool

# Why a batch was dispatched; the label values of the batch-close metric. "deck": put on deck while every
# worker was busy (`CloseRules.deck_share`), whether or not it had closed by another rule.
CLOSE_REASONS = ("full", "delay", "deadline", "drain", "idle", "budget", "deck")
# How a batch closes: "fixed" (full, max_queue_delay_s, deadline, idle worker), "adaptive" (as fixed, and
# the free worker takes the share that pays: batch_close.dispatch_size) or "latency" (batch_close).
BATCH_POLICIES = ("fixed", "adaptive", "latency")

Batch = Sequence[Pending[Any, Any]]


class CloseRules:
    """The policy's settings, the arrival rate, and the worker pool the batches go to."""

    def __init__(
        self,
        worker: WorkerPool[Any, Any],
        *,
        policy: str,
        max_batch_size: int,
        max_queue_delay_s: float,
        deadline_margin_s: float,
        dispatch_when_idle: bool,
        latency_budget_s: float,
    ):
        if policy not in BATCH_POLICIES:
            raise ValueError(f"policy must be one of {BATCH_POLICIES}, got {policy!r}")
        if not latency_budget_s > 0:
            raise ValueError(f"latency_budget_s must be > 0, got {latency_budget_s!r}")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.max_queue_delay_s = float(max_queue_delay_s)
        self.deadline_margin_s = deadline_margin_s
        self.dispatch_when_idle = dispatch_when_idle
        self.latency_budget_s = float(latency_budget_s)
        self.arrivals = ArrivalRate()
        self._worker = worker

    def reason(self, batch: Batch, now: float, stopping: bool) -> str | None:
        """Why ``batch`` closes now (a `CLOSE_REASONS` value), or None to keep it open."""
        if len(batch) >= self.max_batch_size:
            return "full"
        if stopping:
            return "drain"
        times = self._worker.batch_times
        if self.policy == "latency":
            known = times.seconds if times.known else None
            return close_reason(self.state(batch, now), known, fitted=times.fitted)
        if now >= batch[0].enqueued_at + self.max_queue_delay_s:
            return "delay"
        if any(p.deadline - self.deadline_margin_s <= now for p in batch):
            return "deadline"
        if self.dispatch_when_idle and self._worker.idle:
            return "idle"
        return None

    def open_for_s(self, batch: Batch, now: float) -> float | None:
        """How long an open ``batch`` may wait before the decision is worth taking again (None: until the
        next event)."""
        if self.policy == "latency":
            return wait_s(self.state(batch, now))
        close_at = batch[0].enqueued_at + self.max_queue_delay_s
        earliest = min(p.deadline for p in batch) - self.deadline_margin_s
        return min(close_at, earliest) - now

    def share(self, size: int, now: float, frames_only: bool = False) -> int:
        """How many of a closed batch of ``size`` the free worker takes (`WorkerPool.share`). The bound on a
        batch's time protects requests that wait for their answer: a batch of stream frames alone, whose
        budget comes from throughput (`DynamicBatcher.throughput`), has none."""
        longest_s = math.inf if frames_only else self.latency_budget_s * LONGEST_BATCH_SHARE
        return self._worker.share(
            size,
            self.arrivals.rate(now),
            self.max_batch_size,
            adaptive=self.policy == "adaptive",
            longest_s=longest_s,
        )

    def deck_share(self, batch: Batch, now: float, closed: bool) -> int:
        """How many of ``batch`` go on deck now (0: none), every worker busy: the share the worker that
        frees first would take (`WorkerPool.share` with ``ahead``) of the batch if it ``closed``, or else of
        a full one, where the batch holds that many already (it would not grow into a larger share). Which
        requests those are is the batcher's choice (`DynamicBatcher._deck_part`: never stream frames)."""
        if not self._worker.deck_free:
            return 0
        size = len(batch) if closed else self.max_batch_size
        share = self._worker.share(
            size,
            self.arrivals.rate(now),
            self.max_batch_size,
            adaptive=self.policy == "adaptive",
            longest_s=self.latency_budget_s * LONGEST_BATCH_SHARE,
            ahead=True,
        )
        if share > len(batch):
            return 0
        return share

    def over_budget(self, batch: Batch) -> bool:
        """Latency policy: one more request would keep the batch's oldest past its budget."""
        times = self._worker.batch_times
        if self.policy != "latency" or not batch or not times.fitted:
            return False
        return close_reason(self.state(batch, time.monotonic()), times.seconds) == "budget"

    def state(self, batch: Batch, now: float) -> BatchState:
        earliest_deadline = min(p.deadline for p in batch)
        running, running_since = self._worker.next_free()
        remaining = self._worker.batch_times.seconds(running) - (now - running_since) if running else 0.0
        return BatchState(
            size=len(batch),
            max_batch_size=self.max_batch_size,
            now=now,
            oldest_budget_end=min(batch[0].enqueued_at + self.latency_budget_s, earliest_deadline),
            earliest_start_by=earliest_deadline - self.deadline_margin_s,
            worker_idle=self._worker.idle,
            worker_remaining_s=max(0.0, remaining),
            arrival_rate=self.arrivals.rate(now),
        )

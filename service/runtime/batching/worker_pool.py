"""Several batch workers for one model: batches run side by side, each in its own thread.

A runtime that can run several inferences at once (OpenVINO with ``DETECT_OPENVINO_STREAMS`` > 1: each
stream a share of the cores, no barrier between them) gets one `BatchWorker` per stream. The batcher
treats the pool like one worker that is idle while any member is: a closed batch goes to the first idle
member. All members share one batch-time model, fitted on batches timed while the others ran too, so
its estimates describe the pool as it runs under load.

Solo: a runtime that also has a graph for one image on every thread (`Backend.solo`) gets one more worker
for it. A lone interactive request that finds every member idle runs there (`dispatch(..., solo=True)`)
when `batch_close.solo_pays`: it finishes sooner than on one stream, and the members wait while it runs
(both graphs on the cores at once would slow both), so the pool is idle only once it is done. What that
costs depends on how the clients send: the pool counts the requests that arrive while a lone request
runs (one that found the pool idle, on either graph: `arrived`, `batch_close.HeldUp`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from service.runtime.batching.batch_close import (
    KEEP_UP_HEADROOM,
    HeldUp,
    dispatch_size,
    pool_share,
    solo_pays,
)
from service.runtime.batching.batch_worker import BatcherMetrics, BatchWorker, Failed, Pending
from service.runtime.batching.wait_estimate import BatchTimeModel

In = TypeVar("In")
Out = TypeVar("Out")


class WorkerPool(Generic[In, Out]):
    """``count`` `BatchWorker` s sharing one `BatchTimeModel`; ``on_idle`` runs whenever one finishes."""

    def __init__(
        self,
        name: str,
        run_batch: Callable[[list[In]], Sequence[Out | Failed]],
        metrics: BatcherMetrics,
        on_idle: Callable[[], None],
        count: int = 1,
        fit_predicts_sizes: bool = True,
        run_solo: Callable[[list[In]], Sequence[Out | Failed]] | None = None,
    ) -> None:
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {count!r}")
        self.batch_times = BatchTimeModel()
        # False: a size the line through the batch times predicts is not trusted until it has run.
        self._measured = None if fit_predicts_sizes else self.batch_times.measured
        self.workers: list[BatchWorker[In, Out]] = [
            BatchWorker(name, run_batch, metrics, self._ended, batch_times=self.batch_times, thread=f"{i}")
            for i in range(count)
        ]
        # One image on every thread (a runtime's solo graph), while the members wait; its own batch times.
        self.solo: BatchWorker[In, Out] | None = None
        if run_solo is not None and count > 1:
            self.solo = BatchWorker(name, run_solo, metrics, self._ended, thread="solo")
        self._on_idle = on_idle
        # Requests that arrive while a lone request runs, against the arrival rate (`batch_close.HeldUp`).
        self.held_up = HeldUp()
        self._lone: BatchWorker[In, Out] | None = None  # the worker running a lone request, if any
        self._lone_rate = 0.0  # the arrival rate when it started
        self._lone_arrivals = 0

    def arrived(self) -> None:
        """A request arrived for this model (counted while a lone request runs)."""
        if self._lone is not None:
            self._lone_arrivals += 1

    def _ended(self) -> None:
        """A worker finished its batch: close the count of a lone request's run, then tell the batcher."""
        lone = self._lone
        if lone is not None and lone.idle:
            elapsed = time.monotonic() - lone.running_since
            self.held_up.ran(self._lone_arrivals, self._lone_rate * elapsed)
            self._lone = None
        self._on_idle()

    @property
    def _solo_running(self) -> bool:
        return self.solo is not None and not self.solo.idle

    @property
    def idle(self) -> bool:
        """A member is free (and the solo worker is not running): a batch closed now starts at once."""
        return not self._solo_running and any(w.idle for w in self.workers)

    @property
    def all_idle(self) -> bool:
        return not self._solo_running and all(w.idle for w in self.workers)

    @property
    def running_images(self) -> int:
        return sum(w.running_size for w in self.workers) + (self.solo.running_size if self.solo else 0)

    def next_free(self) -> tuple[int, float]:
        """``(running_size, running_since)`` of the member that should free up first; ``(0, 0.0)`` when
        one is idle already. While the solo worker runs, its batch (timed as a member's, a bound from
        above)."""
        if self.solo is not None and not self.solo.idle:
            return self.solo.running_size, self.solo.running_since
        if self.idle:
            return 0, 0.0
        soonest = min(self.workers, key=self._finishes_at)
        return soonest.running_size, soonest.running_since

    def _finishes_at(self, worker: BatchWorker[In, Out]) -> float:
        """When ``worker``'s running batch should end (`time.monotonic`), by the fitted batch time."""
        return worker.running_since + self.batch_times.seconds(worker.running_size)

    def share(
        self,
        size: int,
        rate: float = 0.0,
        max_batch_size: int | None = None,
        *,
        adaptive: bool = False,
        longest_s: float = math.inf,
    ) -> int:
        """How much of a closed batch of ``size`` the free member takes now; the rest waits for the next
        member to free up (`batch_close.pool_share`, with ``rate`` the model's arrival rate; everything
        while the fit has seen one batch size only). ``adaptive`` (the adaptive batching policy): judged
        on the time each batch size measured (`BatchTimeModel.size_seconds`), only sizes that beat single
        requests (`batch_close.gainful`), with one worker too (`batch_close.dispatch_size`), and batches
        longer than ``longest_s`` with one worker only once the shorter ones fall behind
        (`batch_close.within`), with several never; everything only while no batch has been timed at all."""
        idle = self.next_idle()
        if size <= 1 or idle is None:
            return size
        if not (self.batch_times.known if adaptive else self.batch_times.fitted):
            return size
        seconds = self.batch_times.size_seconds if adaptive else self.batch_times.seconds
        if len(self.workers) == 1:
            if not adaptive:
                return size
            return dispatch_size(
                size,
                seconds,
                rate=rate,
                max_batch_size=max_batch_size or size,
                measured=self._measured,
                longest_s=longest_s,
            )
        now = time.monotonic()
        next_free = min(
            0.0 if w.idle else max(0.0, self._finishes_at(w) - now) for w in self.workers if w is not idle
        )
        return pool_share(
            size,
            seconds,
            next_free,
            rate_per_worker=rate * (KEEP_UP_HEADROOM if adaptive else 1.0) / len(self.workers),
            max_batch_size=max_batch_size,
            gain_margin=adaptive,
            measured=self._measured,
            longest_s=longest_s,
        )

    def next_idle(self) -> BatchWorker[In, Out] | None:
        """The member the next batch goes to (None: all busy, or the solo worker running)."""
        if self._solo_running:
            return None
        return next((w for w in self.workers if w.idle), None)

    def solo_now(self, rate: float) -> bool:
        """Whether a lone request closed now, at an arrival ``rate`` per second, runs on the solo worker:
        there is one, every member is idle, and it pays (`batch_close.solo_pays`, from the warmup's times
        of one image on a stream and on the solo graph, the solo graph's time lately and the share of due
        arrivals that came while lone requests ran: `held_up`)."""
        if self.solo is None or not self.all_idle:
            return False
        stream_lone = self.batch_times.seeded(1)
        solo_lone = self.solo.batch_times.seeded(1)
        if stream_lone is None or solo_lone is None:
            return False
        solo_s = self.solo.batch_times.size_seconds(1)
        return solo_pays(stream_lone, solo_lone, solo_s, rate, self.held_up.share)

    def dispatch(
        self, batch: list[Pending[In, Out]], inline: bool = False, solo: bool = False, rate: float = 0.0
    ) -> None:
        """Start ``batch`` on the first idle member (one must be idle), or with ``solo`` (a batch of one,
        every member idle) on the solo worker; ``rate``: the model's arrival rate now."""
        worker = self.solo if solo else self.next_idle()
        if solo and (worker is None or len(batch) != 1 or not self.all_idle):
            raise RuntimeError("a solo batch needs the solo worker, one request and an idle pool")
        if worker is None:
            raise RuntimeError("dispatch with every worker busy")
        if len(batch) == 1 and self.all_idle and len(self.workers) > 1:
            self._lone, self._lone_rate, self._lone_arrivals = worker, rate, 0
        worker.dispatch(batch, inline=inline)

    def _all_workers(self) -> list[BatchWorker[In, Out]]:
        return [*self.workers, *([self.solo] if self.solo is not None else [])]

    def running_tasks(self) -> list[asyncio.Future[None]]:
        return [w.task for w in self._all_workers() if w.task is not None and not w.task.done()]

    def shutdown(self) -> None:
        for worker in self._all_workers():
            worker.shutdown()

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

On deck (``on_deck``): while every member is busy, the batcher may put the next batch on deck
(`put_on_deck`). The first member whose batch ends takes it on its own thread and starts it at once
(`BatchWorker` ``take_next``): between two batches of a stream there is no round trip through the event
loop, whose turn may come only after other requests' work. One batch at most waits there, so a request that
arrives later waits behind one batch more at most, as it would behind a running one. A member that frees
while the deck holds a batch its thread did not see takes it from the loop (`_ended`).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from service.errors import ServiceUnavailable
from service.runtime.batching.batch_close import (
    KEEP_UP_HEADROOM,
    HeldUp,
    dispatch_size,
    pool_share,
    solo_pays,
)
from service.runtime.batching.batch_worker import (
    BatcherMetrics,
    BatchWorker,
    Failed,
    OnDeck,
    Pending,
    started_waits,
)
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
        on_deck: bool = False,
    ) -> None:
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {count!r}")
        self._metrics = metrics
        self.on_deck = on_deck
        # The batch on deck: put there on the event loop, taken by the first member thread whose batch ends
        # (or by the loop, `_ended`); the lock is all the two share.
        self._deck: OnDeck[In, Out] | None = None
        self._deck_lock = threading.Lock()
        self._closed = False
        self.batch_times = BatchTimeModel()
        # False: a size the line through the batch times predicts is not trusted until it has run.
        self._measured = None if fit_predicts_sizes else self.batch_times.measured
        self.workers: list[BatchWorker[In, Out]] = [
            BatchWorker(
                name,
                run_batch,
                metrics,
                self._ended,
                batch_times=self.batch_times,
                thread=f"{i}",
                take_next=self._take_deck if on_deck else None,
            )
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
        """A worker finished its batch: close the count of a lone request's run, start the batch on deck on
        a member that is idle (its thread ended before the batch was put there), then tell the batcher."""
        lone = self._lone
        if lone is not None and lone.idle:
            elapsed = time.monotonic() - lone.running_since
            self.held_up.ran(self._lone_arrivals, self._lone_rate * elapsed)
            self._lone = None
        if self._deck is not None:
            idle = self.next_idle()
            if idle is not None:
                queued = self._take_deck()
                if queued is not None:
                    started_waits(queued.batch, time.monotonic(), self._metrics)
                    idle.dispatch(queued.batch, handed_out=queued.handed_out)
        self._on_idle()

    def _take_deck(self) -> OnDeck[In, Out] | None:
        """The batch on deck, taken off it (on a member's thread as its batch ends, or on the loop)."""
        with self._deck_lock:
            queued, self._deck = self._deck, None
        return queued

    @property
    def deck_size(self) -> int:
        """Images on deck: started before any request queued now."""
        deck = self._deck
        return len(deck.batch) if deck is not None else 0

    @property
    def deck_free(self) -> bool:
        """A batch may go on deck now: the pool has a deck and several members, the deck is empty, and every
        member is busy (no solo batch running: while it runs the members wait, idle). One worker has none:
        its batches are long, and one on deck would be sized before the batch could grow."""
        return (
            self.on_deck
            and len(self.workers) > 1
            and not self._closed
            and self._deck is None
            and not self._solo_running
            and not any(w.idle for w in self.workers)
        )

    def put_on_deck(self, batch: list[Pending[In, Out]]) -> None:
        """Queue ``batch`` to start as soon as a member's batch ends (`deck_free` must hold)."""
        if not self.deck_free:
            raise RuntimeError("the deck is taken, off, or a member is idle")
        queued = OnDeck(batch, asyncio.get_running_loop().create_future())
        with self._deck_lock:
            self._deck = queued

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
        ahead: bool = False,
    ) -> int:
        """How much of a closed batch of ``size`` the free member takes now; the rest waits for the next
        member to free up (`batch_close.pool_share`, with ``rate`` the model's arrival rate; everything
        while the fit has seen one batch size only). ``adaptive`` (the adaptive batching policy): judged
        on the time each batch size measured (`BatchTimeModel.size_seconds`), only sizes that beat single
        requests (`batch_close.gainful`), with one worker too (`batch_close.dispatch_size`), and batches
        longer than ``longest_s`` with one worker only once the shorter ones fall behind
        (`batch_close.within`), with several never; everything only while no batch has been timed at all.
        ``ahead``: with every member busy, the share of the member that should free up first, as it frees
        (what goes on deck)."""
        idle = self.next_idle()
        now = time.monotonic()
        if idle is None and ahead:
            idle = min(self.workers, key=self._finishes_at)
            now = max(now, self._finishes_at(idle))
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
        """What a drain waits for: each running batch's hand-out, and the batch on deck's."""
        tasks = [w.task for w in self._all_workers() if w.task is not None and not w.task.done()]
        deck = self._deck
        if deck is not None and not deck.handed_out.done():
            tasks.append(deck.handed_out)
        return tasks

    def shutdown(self) -> None:
        """Stop every thread; a batch on deck fails with 503, as one not yet started does."""
        self._closed = True
        queued = self._take_deck()
        if queued is not None:
            name = self.workers[0].name
            for pending in queued.batch:
                if not pending.future.done():
                    pending.future.set_exception(
                        ServiceUnavailable(f"model {name!r} shut down before this request ran")
                    )
            if not queued.handed_out.done():
                queued.handed_out.set_result(None)
        for worker in self._all_workers():
            worker.shutdown()

"""Dynamic batching: many concurrent requests, one inference call per batch.

One `DynamicBatcher` serves one loaded model. Each request waits on its own future. A batch starts with
the oldest waiting request and closes by the policy's rules (`service.runtime.batching.close_rules`).
Inference runs in a dedicated thread, so the next batch forms while the current one runs; if the worker is
still busy when a batch closes, the batch keeps filling (up to the maximum size) until the worker is free.

Before a batch runs, requests whose caller gave up (cancelled: e.g. the client disconnected) or whose
deadline has passed (504) are dropped, so they cost no compute. A failing batch fails each of its
waiters (500) and only those; the batcher keeps serving. The background task is owned: if it dies, the
failure is logged, waiters are failed and `alive` turns false (readiness reports it).

Priority: every item is ``interactive`` (a `/detect` or Open Inference Protocol request), ``bulk`` (a tile
of a tiled request, `service.pipeline.inference`) or ``stream`` (a frame of a camera session,
`service.streams`). Interactive items go into a batch first and shed queued stream frames when the queue is
full (`service.runtime.batching.batch_queue`); their expected wait counts only the interactive items ahead
of them. Bulk items come next and are never shed. A stream frame is refused when the queue is full.

With an `service.runtime.batching.inline.InlineWork`, a batch of interactive items that finds nothing else
running in the service and is expected to be short runs on the event loop itself instead of the worker
thread (two thread wake-ups fewer for a lone request).

The batcher knows nothing about models: it batches opaque items through ``run_batch``, which its
`service.runtime.batching.batch_worker.BatchWorker` runs (one, or a
`service.runtime.batching.worker_pool.WorkerPool` of them side by side when the runtime runs several
inferences at once), and a solo worker beside them when the runtime has a graph for a lone image on every
thread: ``run_solo``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from service.errors import DeadlineExceeded, ServiceError, ServiceUnavailable
from service.runtime.batching.batch_queue import BatchQueue, Priority, run_order
from service.runtime.batching.batch_worker import (
    BatcherMetrics,
    Failed,
    ItemTimes,
    NoMetrics,
    Pending,
    started_waits,
)
from service.runtime.batching.close_rules import CloseRules
from service.runtime.batching.inline import InlineWork
from service.runtime.batching.queue_admission import QueueAdmission
from service.runtime.batching.worker_pool import WorkerPool

logger = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")


# A batch closes this long before its earliest deadline, so that request can still start in time.
DEFAULT_DEADLINE_MARGIN_S = 0.002


class DynamicBatcher(QueueAdmission[In, Out]):
    """Batches `submit` calls into ``run_batch(items) -> outputs`` calls (one output per item, in order).

    ``run_batch`` runs in worker threads owned by the batcher: one, or ``workers`` side by side for a
    runtime that runs that many inferences at once (`service.runtime.batching.worker_pool`).
    ``fit_predicts_sizes`` False (a runtime with a graph of its own for some sizes): the adaptive policy
    uses only batch sizes it has measured (`service.runtime.batching.batch_close.gainful`). ``on_deck``:
    while every worker is busy, the next batch waits on deck and starts on the first worker thread whose
    batch ends (`service.runtime.batching.worker_pool`). Call `start` inside a running event loop (the app
    lifespan) and `stop` on shutdown.
    """

    def __init__(
        self,
        name: str,
        run_batch: Callable[[list[In]], Sequence[Out | Failed]],
        *,
        max_batch_size: int,
        max_queue_delay_s: float,
        max_queue_size: int,
        metrics: BatcherMetrics | None = None,
        deadline_margin_s: float = DEFAULT_DEADLINE_MARGIN_S,
        dispatch_when_idle: bool = False,
        policy: str = "fixed",
        latency_budget_s: float = 0.1,
        inline: InlineWork | None = None,
        workers: int = 1,
        stream_batch_size: int | None = None,
        fit_predicts_sizes: bool = True,
        run_solo: Callable[[list[In]], Sequence[Out | Failed]] | None = None,
        on_deck: bool = False,
    ):
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        if not max_queue_delay_s >= 0:
            raise ValueError(f"max_queue_delay_s must be >= 0, got {max_queue_delay_s!r}")
        if not isinstance(max_queue_size, int) or max_queue_size < 1:
            raise ValueError(f"max_queue_size must be an integer >= 1, got {max_queue_size!r}")
        self.name = name
        self.max_batch_size = max_batch_size
        self.max_queue_size = max_queue_size
        self._metrics: BatcherMetrics = metrics or NoMetrics()
        self._inline = inline

        # Stream frames per batch at most (`BatchQueue.take`): the batch an interactive request waits for.
        self.stream_batch_size = min(stream_batch_size or max_batch_size, max_batch_size)
        self._waiting: BatchQueue[In, Out] = BatchQueue(name, self.stream_batch_size)
        self._dispatching: list[Pending[In, Out]] = []  # closed, being handed to the worker
        # Set on anything the collector may be waiting for: a new request, a finished batch, stop().
        self._changed = asyncio.Event()
        self._worker: WorkerPool[In, Out] = WorkerPool(
            name,
            run_batch,
            self._metrics,
            self._changed.set,
            count=workers,
            fit_predicts_sizes=fit_predicts_sizes,
            run_solo=run_solo,
            on_deck=on_deck,
        )
        self.batch_times = self._worker.batch_times
        # The solo worker's batch times (None: no solo graph); seeded with its warmup time like the pool's.
        self.solo_batch_times = self._worker.solo.batch_times if self._worker.solo is not None else None
        self._rules = CloseRules(
            self._worker,
            policy=policy,
            max_batch_size=max_batch_size,
            max_queue_delay_s=max_queue_delay_s,
            deadline_margin_s=deadline_margin_s,
            dispatch_when_idle=dispatch_when_idle,
            latency_budget_s=latency_budget_s,
        )
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._stopping = False

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the background task that forms and dispatches batches."""
        if self._task is not None:
            raise RuntimeError(f"batcher {self.name!r} already started")
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")
        self._task.add_done_callback(self._on_loop_done)
        if self._inline is not None:
            self._inline.register(self)

    @property
    def alive(self) -> bool:
        """True while the background task runs and has not failed."""
        return self._task is not None and not self._task.done() and self._failure is None

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def busy(self) -> bool:
        """A batch running, or requests waiting."""
        return not self._worker.all_idle or self.queue_depth > 0

    async def stop(self, timeout: float | None = None) -> None:
        """Stop accepting requests, run everything already queued, then stop the worker.

        After ``timeout`` seconds, still-waiting requests fail with 503 and the loop is cancelled.
        """
        self._stopping = True
        self._changed.set()
        try:
            if self._task is not None and not self._task.done():
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            running = self._worker.running_tasks()
            if running:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*running)), timeout)
        except TimeoutError:
            logger.warning(
                "batcher %r: drain timed out after %ss; failing waiting requests", self.name, timeout
            )
            if self._task is not None:
                self._task.cancel()
            self._fail_waiting(ServiceUnavailable(f"model {self.name!r} shut down before this request ran"))
        finally:
            if self._inline is not None:
                self._inline.unregister(self)
            self._worker.shutdown()

    # ------------------------------------------------------------------ submit

    async def submit(
        self,
        item: In,
        *,
        deadline: float | None = None,
        times: ItemTimes | None = None,
        priority: Priority = "interactive",
    ) -> Out:
        """Queue ``item`` and wait for its output.

        ``deadline`` is a `time.monotonic` time by which inference must start, or None for no limit.
        ``times``, if given, receives when this request waited and ran (`ItemTimes`).
        Raises `QueueFull` (429) when ``max_queue_size`` requests are waiting, `ServiceUnavailable`
        (503) when stopping or dead, `DeadlineExceeded` (504) when the request could not start in time,
        and whatever the batch raised (`BackendError`, 500) when inference failed. A ``stream`` item is
        taken after interactive ones and shed first (`QueueFull`) when an interactive request needs room.
        Cancelling the caller removes the request before it runs.
        """
        if self._stopping:
            raise ServiceUnavailable(f"model {self.name!r} is shutting down", retry_after_s=1)
        if not self.alive:
            raise ServiceUnavailable(
                f"model {self.name!r} is not serving (batcher not running)", retry_after_s=5
            )
        self._check_room(1, priority)
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        background = priority == "stream"
        pending: Pending[In, Out] = Pending(
            item,
            loop.create_future(),
            now,
            math.inf if deadline is None else deadline,
            times=times,
            background=background,
            bulk=priority == "bulk",
        )
        self._waiting.append(pending)
        self._rules.arrivals.arrived(now)
        self._worker.arrived()
        self._metrics.queue_depth(self.queue_depth)
        self._changed.set()
        try:
            if math.isfinite(pending.deadline):
                done, _ = await asyncio.wait({pending.future}, timeout=max(0.0, pending.deadline - now))
                if not done and not pending.started:
                    pending.future.cancel()  # the collector skips cancelled requests
                    raise DeadlineExceeded(self._deadline_message(pending))
            # Started (or no deadline): inference is under way, so its result is worth waiting for.
            return await pending.future
        except asyncio.CancelledError:
            pending.future.cancel()
            raise

    def _deadline_message(self, pending: Pending[In, Out]) -> str:
        waited = time.monotonic() - pending.enqueued_at
        return (
            f"model {self.name!r}: request could not start inference before its deadline "
            f"(queued {waited:.3f}s)"
        )

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        while True:
            collected = await self._collect()
            if collected is None:
                return
            batch, reason, deck = collected
            live = self._drop_dead(batch, record_wait=not deck)
            if not live:
                continue
            self._dispatching = live  # if anything below fails, the loop's death handler fails these
            self._metrics.batch_closed(len(live), reason)
            if deck:  # its waits are recorded as it starts
                self._worker.put_on_deck(live)
                self._dispatching = []
                continue
            rate = self._rules.arrivals.rate(time.monotonic())
            solo = self._runs_solo(live, rate)
            if solo:
                self._metrics.solo_batch()
            self._worker.dispatch(live, inline=self._runs_inline(live), solo=solo, rate=rate)
            self._dispatching = []

    def _runs_solo(self, batch: list[Pending[In, Out]], rate: float) -> bool:
        """Run ``batch`` on the solo graph: one interactive request, nothing else waiting, and the pool
        says it pays at the arrival ``rate`` (`WorkerPool.solo_now`)."""
        if len(batch) != 1 or batch[0].background or self.queue_depth > 0:
            return False
        return self._worker.solo_now(rate)

    def _runs_inline(self, batch: list[Pending[In, Out]]) -> bool:
        """Run ``batch`` on the event loop: nothing else waits for this model or runs in the service, and
        the batch's fitted time is within the inline bound (`service.runtime.batching.inline`)."""
        if self._inline is None or self.queue_depth > 0 or not self.batch_times.known:
            return False
        if not self._worker.all_idle:  # another worker of this model runs a batch
            return False
        if any(p.background for p in batch):  # stream frames: see service.runtime.batching.inline
            return False
        return self._inline.batch(self, self.batch_times.seconds(len(batch)))

    async def _collect(self) -> tuple[list[Pending[In, Out]], str, bool] | None:
        """Wait for the next batch to close: ``(batch, reason, on_deck)``, with ``on_deck`` True for a batch
        that goes on deck (`WorkerPool.put_on_deck`); None when stopping with nothing left to run."""
        batch = self._waiting.forming
        capped = False  # "budget": the batch stops growing and waits for the worker
        while True:
            self._changed.clear()
            self._take(batch, len(batch) if capped else self.max_batch_size)
            now = time.monotonic()
            if not batch:
                if self._stopping:
                    return None
                await self._wait_for_change(None)
                continue
            reason = self._rules.reason(batch, now, self._stopping) or ("budget" if capped else None)
            if reason is not None and self._worker.idle:
                share = self._rules.share(len(batch), now, frames_only=all(p.background for p in batch))
                if share < len(batch):  # the part that runs now: interactive items first, stream frames last
                    batch.sort(key=run_order)
                batch, self._waiting.forming = batch[:share], batch[share:]
                self._metrics.queue_depth(self.queue_depth)
                return batch, reason, False
            deck = self._deck_part(batch, now, reason is not None)
            if deck:
                self._waiting.forming = [p for p in batch if p not in deck]
                self._metrics.queue_depth(self.queue_depth)
                return deck, "deck", True
            if reason is not None:
                # Closed but the worker is busy: wait for it (or for more requests to top up with).
                capped = capped or reason == "budget"
                await self._wait_for_change(None)
            else:
                await self._wait_for_change(self._rules.open_for_s(batch, now))

    def _deck_part(self, batch: list[Pending[In, Out]], now: float, closed: bool) -> list[Pending[In, Out]]:
        """The part of ``batch`` that goes on deck now, every worker busy (`CloseRules.deck_share`): its
        interactive requests first, then tiles; none if that part would hold a stream frame."""
        share = self._rules.deck_share(batch, now, closed)
        if share < 1:
            return []
        part = sorted(batch, key=run_order)[:share]
        return [] if any(p.background for p in part) else part

    def _take(self, batch: list[Pending[In, Out]], limit: int) -> None:
        """Fill ``batch`` up to ``limit`` (`BatchQueue.take`; the latency policy's budget may stop it)."""
        self._waiting.take(batch, limit, self._rules.over_budget)
        self._metrics.queue_depth(self.queue_depth)

    async def _wait_for_change(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass

    def _drop_dead(self, batch: list[Pending[In, Out]], record_wait: bool = True) -> list[Pending[In, Out]]:
        """The requests of ``batch`` still worth running, marked started, with their queue wait recorded
        (``record_wait``; a batch put on deck records it as it starts); expired ones get 504."""
        now = time.monotonic()
        live: list[Pending[In, Out]] = []
        for pending in batch:
            if pending.future.done():  # cancelled by its caller while the batch formed
                continue
            if pending.deadline <= now:
                pending.future.set_exception(DeadlineExceeded(self._deadline_message(pending)))
                continue
            pending.started = True
            live.append(pending)
        if record_wait:
            started_waits(live, now, self._metrics)
        return live

    def _on_loop_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._failure = exc
            logger.error("batcher %r died; the model stops serving", self.name, exc_info=exc)
            self._fail_waiting(
                ServiceUnavailable(f"model {self.name!r} batcher failed: {exc}", retry_after_s=5)
            )

    def _fail_waiting(self, error: ServiceError) -> None:
        for pending in [*self._dispatching, *self._waiting.drain()]:
            if not pending.future.done():
                pending.future.set_exception(type(error)(error.message, retry_after_s=error.retry_after_s))
        self._dispatching = []

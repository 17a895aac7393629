"""Dynamic batching: many concurrent requests, one inference call per batch.

One `DynamicBatcher` serves one loaded model. Each request waits on its own future. A batch starts with
the oldest waiting request and closes when it is full, when ``max_queue_delay_s`` has passed since that
first request arrived, or just before the earliest deadline in it would pass. With ``dispatch_when_idle``
a batch also closes as soon as the worker is idle: a request that finds nothing running starts at once
instead of waiting out the delay for company, and batches still form from what arrives while the worker
is busy (the delay then only matters with the option off). Inference runs in a
dedicated thread, so the next batch forms while the current one runs; if the worker is still busy when
a batch closes, the batch keeps filling (up to the maximum size) until the worker is free, because it
could not start any sooner.

Before a batch runs, requests whose caller gave up (cancelled: e.g. the client disconnected) or whose
deadline has passed (504) are dropped, so they cost no compute. A failing batch fails each of its
waiters (500) and only those; the batcher keeps serving. The background task is owned: if it dies, the
failure is logged, waiters are failed and `alive` turns false (readiness reports it).

The batcher knows nothing about models: it batches opaque items through ``run_batch``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from service.errors import BackendError, DeadlineExceeded, QueueFull, ServiceError, ServiceUnavailable
from service.wait_estimate import BatchTimeModel, expected_finish_s, retry_after_s

logger = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")

# Why a batch was dispatched; the label values of the batch-close metric.
CLOSE_REASONS = ("full", "delay", "deadline", "drain", "idle")

# A batch closes this long before its earliest deadline, so that request can still start in time.
DEFAULT_DEADLINE_MARGIN_S = 0.002


class BatcherMetrics(Protocol):
    """What the batcher reports; `service.metrics` implements it per model."""

    def batch_closed(self, size: int, reason: str) -> None: ...
    def queue_wait(self, seconds: float) -> None: ...
    def queue_depth(self, depth: int) -> None: ...
    def inference(self, seconds: float) -> None: ...


class _NoMetrics:
    def batch_closed(self, size: int, reason: str) -> None:
        pass

    def queue_wait(self, seconds: float) -> None:
        pass

    def queue_depth(self, depth: int) -> None:
        pass

    def inference(self, seconds: float) -> None:
        pass


@dataclass(eq=False)
class _Pending(Generic[In, Out]):
    item: In
    future: asyncio.Future[Out]
    enqueued_at: float  # time.monotonic()
    deadline: float  # time.monotonic() by which inference must start; inf = none
    started: bool = field(default=False)
    times: dict[str, float] | None = None  # filled with this request's queue_wait and inference seconds


class DynamicBatcher(Generic[In, Out]):
    """Batches `submit` calls into ``run_batch(items) -> outputs`` calls (one output per item, in order).

    ``run_batch`` runs in a single worker thread owned by the batcher. Call `start` inside a running
    event loop (the app lifespan) and `stop` on shutdown.
    """

    def __init__(
        self,
        name: str,
        run_batch: Callable[[list[In]], Sequence[Out]],
        *,
        max_batch_size: int,
        max_queue_delay_s: float,
        max_queue_size: int,
        metrics: BatcherMetrics | None = None,
        deadline_margin_s: float = DEFAULT_DEADLINE_MARGIN_S,
        dispatch_when_idle: bool = False,
    ):
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        if not max_queue_delay_s >= 0:
            raise ValueError(f"max_queue_delay_s must be >= 0, got {max_queue_delay_s!r}")
        if not isinstance(max_queue_size, int) or max_queue_size < 1:
            raise ValueError(f"max_queue_size must be an integer >= 1, got {max_queue_size!r}")
        self.name = name
        self.max_batch_size = max_batch_size
        self.max_queue_delay_s = float(max_queue_delay_s)
        self.max_queue_size = max_queue_size
        self.deadline_margin_s = deadline_margin_s
        self.dispatch_when_idle = dispatch_when_idle
        self._run_batch = run_batch
        self._metrics: BatcherMetrics = metrics or _NoMetrics()

        self._queue: deque[_Pending[In, Out]] = deque()
        self._forming: list[_Pending[In, Out]] = []  # taken from the queue, not yet dispatched
        self._dispatching: list[_Pending[In, Out]] = []  # closed, being handed to the worker
        # Set on anything the collector may be waiting for: a new request, a finished batch, stop().
        self._changed = asyncio.Event()
        self._worker_idle = True
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"infer-{name}")
        self._task: asyncio.Task[None] | None = None
        self._running: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._stopping = False
        self.batch_times = BatchTimeModel()
        self._running_size = 0  # images in the batch being computed (0: none)
        self._running_since = 0.0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the background task that forms and dispatches batches."""
        if self._task is not None:
            raise RuntimeError(f"batcher {self.name!r} already started")
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")
        self._task.add_done_callback(self._on_loop_done)

    @property
    def alive(self) -> bool:
        """True while the background task runs and has not failed."""
        return self._task is not None and not self._task.done() and self._failure is None

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def queue_depth(self) -> int:
        """Requests waiting to start inference (queued plus the batch being formed)."""
        return len(self._queue) + len(self._forming)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop accepting requests, run everything already queued, then stop the worker.

        After ``timeout`` seconds, still-waiting requests fail with 503 and the loop is cancelled.
        """
        self._stopping = True
        self._changed.set()
        try:
            if self._task is not None and not self._task.done():
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            if self._running is not None and not self._running.done():
                await asyncio.wait_for(asyncio.shield(self._running), timeout)
        except TimeoutError:
            logger.warning(
                "batcher %r: drain timed out after %ss; failing waiting requests", self.name, timeout
            )
            if self._task is not None:
                self._task.cancel()
            self._fail_waiting(ServiceUnavailable(f"model {self.name!r} shut down before this request ran"))
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ submit

    def retry_after_s(self) -> float:
        """A guess at when the queue will have room: the time to run what is queued now."""
        return retry_after_s(self.expected_finish_s(1), 0.0)

    def expected_finish_s(self, images: int) -> float:
        """Seconds until ``images`` queued now would be done, from the measured batch times (0: unknown)."""
        return expected_finish_s(
            self.batch_times,
            queued=self.queue_depth,
            images=images,
            max_batch_size=self.max_batch_size,
            running_size=self._running_size,
            running_for_s=time.monotonic() - self._running_since,
        )

    def admit(self, images: int, deadline: float | None) -> None:
        """Refuse at once (`QueueFull`, 429 with Retry-After) a request of ``images`` that would overfill
        the queue, or that the queue as it is would keep from finishing by ``deadline``
        (`time.monotonic`). A request with nothing ahead of it is always admitted: it starts at once.

        Until a batch has run the wait is unknown and only the queue size limits admission.
        """
        if self.queue_depth + images > self.max_queue_size:
            raise QueueFull(
                f"model {self.name!r} has {self.queue_depth} images waiting (max_queue_size "
                f"{self.max_queue_size}); retry later",
                retry_after_s=self.retry_after_s(),
            )
        nothing_ahead = self.queue_depth == 0 and self._running_size == 0
        if deadline is None or nothing_ahead or not self.batch_times.known:
            return
        finish = self.expected_finish_s(images)
        budget = deadline - time.monotonic()
        if finish > budget:
            raise QueueFull(
                f"model {self.name!r} is overloaded: {self.queue_depth} images are queued ahead and this "
                f"request would finish in ~{finish:.1f}s, past its deadline ({max(budget, 0.0):.1f}s left); "
                "retry later",
                retry_after_s=retry_after_s(finish, budget),
            )

    async def submit(
        self, item: In, *, deadline: float | None = None, times: dict[str, float] | None = None
    ) -> Out:
        """Queue ``item`` and wait for its output.

        ``deadline`` is a `time.monotonic` time by which inference must start, or None for no limit.
        ``times``, if given, receives this request's ``queue_wait`` and ``inference`` seconds.
        Raises `QueueFull` (429) when ``max_queue_size`` requests are waiting, `ServiceUnavailable`
        (503) when stopping or dead, `DeadlineExceeded` (504) when the request could not start in time,
        and whatever the batch raised (`BackendError`, 500) when inference failed.
        Cancelling the caller removes the request before it runs.
        """
        if self._stopping:
            raise ServiceUnavailable(f"model {self.name!r} is shutting down", retry_after_s=1)
        if not self.alive:
            raise ServiceUnavailable(
                f"model {self.name!r} is not serving (batcher not running)", retry_after_s=5
            )
        if self.queue_depth >= self.max_queue_size:
            raise QueueFull(
                f"model {self.name!r} has {self.queue_depth} requests waiting (max_queue_size "
                f"{self.max_queue_size}); retry later",
                retry_after_s=self.retry_after_s(),
            )
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        pending: _Pending[In, Out] = _Pending(
            item, loop.create_future(), now, math.inf if deadline is None else deadline, times=times
        )
        self._queue.append(pending)
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

    def _deadline_message(self, pending: _Pending[In, Out]) -> str:
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
            batch, reason = collected
            live = self._drop_dead(batch)
            if not live:
                continue
            self._dispatching = live  # if anything below fails, the loop's death handler fails these
            self._metrics.batch_closed(len(live), reason)
            self._worker_idle = False
            self._running_size, self._running_since = len(live), time.monotonic()
            self._running = asyncio.get_running_loop().create_task(
                self._execute(live), name=f"batch-{self.name}"
            )
            self._dispatching = []

    async def _collect(self) -> tuple[list[_Pending[In, Out]], str] | None:
        """Wait for the next batch to close; None when stopping with nothing left to run."""
        batch = self._forming
        while True:
            self._changed.clear()
            self._take(batch)
            now = time.monotonic()
            if not batch:
                if self._stopping:
                    return None
                await self._wait_for_change(None)
                continue
            reason = self._close_reason(batch, now)
            if reason is not None and self._worker_idle:
                self._forming = []
                self._metrics.queue_depth(self.queue_depth)
                return batch, reason
            if reason is not None:
                # Closed but the worker is busy: wait for it (or for more requests to top up with).
                await self._wait_for_change(None)
            else:
                close_at = batch[0].enqueued_at + self.max_queue_delay_s
                earliest = min(p.deadline for p in batch) - self.deadline_margin_s
                await self._wait_for_change(min(close_at, earliest) - now)

    def _take(self, batch: list[_Pending[In, Out]]) -> None:
        while self._queue and len(batch) < self.max_batch_size:
            pending = self._queue.popleft()
            if not pending.future.done():  # done here = cancelled or expired while queued
                batch.append(pending)
        self._metrics.queue_depth(self.queue_depth)

    def _close_reason(self, batch: list[_Pending[In, Out]], now: float) -> str | None:
        if len(batch) >= self.max_batch_size:
            return "full"
        if self._stopping:
            return "drain"
        if now >= batch[0].enqueued_at + self.max_queue_delay_s:
            return "delay"
        if any(p.deadline - self.deadline_margin_s <= now for p in batch):
            return "deadline"
        if self.dispatch_when_idle and self._worker_idle:
            return "idle"
        return None

    async def _wait_for_change(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass

    def _drop_dead(self, batch: list[_Pending[In, Out]]) -> list[_Pending[In, Out]]:
        """The requests of ``batch`` still worth running, marked started; expired ones get 504."""
        now = time.monotonic()
        live: list[_Pending[In, Out]] = []
        for pending in batch:
            if pending.future.done():  # cancelled by its caller while the batch formed
                continue
            if pending.deadline <= now:
                pending.future.set_exception(DeadlineExceeded(self._deadline_message(pending)))
                continue
            pending.started = True
            self._metrics.queue_wait(now - pending.enqueued_at)
            if pending.times is not None:
                pending.times["queue_wait"] = now - pending.enqueued_at
            live.append(pending)
        return live

    async def _execute(self, batch: list[_Pending[In, Out]]) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            outputs = await loop.run_in_executor(self._executor, self._run_batch, [p.item for p in batch])
        except asyncio.CancelledError:
            self._worker_done(batch, started)
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(
                        ServiceUnavailable(f"model {self.name!r} shut down mid-batch")
                    )
            raise
        except Exception as exc:
            self._worker_done(batch, started)
            self._fail_batch(batch, exc)
            return
        # The worker is free before the results are handed out, so the next batch is dispatched first
        # (its wake-up is queued ahead of the waiters') and inference does not wait on their responses.
        self._worker_done(batch, started)
        if len(outputs) != len(batch):
            error = BackendError(
                f"model {self.name!r} returned {len(outputs)} results for {len(batch)} inputs"
            )
            self._fail_batch(batch, error)
            return
        for pending, output in zip(batch, outputs, strict=True):
            if not pending.future.done():
                pending.future.set_result(output)

    def _worker_done(self, batch: list[_Pending[In, Out]], started: float) -> None:
        elapsed = time.monotonic() - started
        self._metrics.inference(elapsed)
        for pending in batch:
            if pending.times is not None:
                pending.times["inference"] = elapsed
        self.batch_times.observe(len(batch), elapsed)
        self._running_size = 0
        self._worker_idle = True
        self._changed.set()

    def _fail_batch(self, batch: list[_Pending[In, Out]], exc: Exception) -> None:
        logger.error("batcher %r: batch of %d failed: %s", self.name, len(batch), exc, exc_info=exc)
        message = (
            exc.message if isinstance(exc, ServiceError) else f"inference failed: {type(exc).__name__}: {exc}"
        )
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(BackendError(f"model {self.name!r}: {message}"))

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
        for pending in [*self._dispatching, *self._forming, *self._queue]:
            if not pending.future.done():
                pending.future.set_exception(type(error)(error.message, retry_after_s=error.retry_after_s))
        self._dispatching = []
        self._forming = []
        self._queue.clear()

"""Running closed batches: the batcher's inference thread and what each waiting request is.

`BatchWorker` owns one thread. It runs a batch ``run_batch(items) -> outputs`` there, checks one output
per input, hands each waiter its output (or, where ``run_batch`` put a `Failed` in its place, that item's
own error), or the batch's failure to every waiter of that batch (500), and
times each batch (`service.runtime.batching.wait_estimate.BatchTimeModel`) for the batcher's admission
estimates. `service.runtime.batching.batcher` decides what goes into a batch and when; this module only
runs it.

On deck: a worker of a pool (`service.runtime.batching.worker_pool`) may be given ``take_next``, which hands
its thread the batch the pool put on deck while every worker was busy. The thread then starts that batch as
soon as its own ends, without waiting for the event loop to hand out the outputs and dispatch it, and tells
the loop both things in one callback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from opentelemetry.trace import SpanContext

from service.errors import BackendError, ServiceError, ServiceUnavailable
from service.runtime import tracing
from service.runtime.batching.wait_estimate import BatchTimeModel

logger = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")


class BatcherMetrics(Protocol):
    """What the batcher reports; `service.runtime.metrics` implements it per model."""

    def batch_closed(self, size: int, reason: str) -> None: ...
    def queue_wait(self, seconds: float) -> None: ...
    def queue_depth(self, depth: int) -> None: ...
    def inference(self, seconds: float) -> None: ...
    def solo_batch(self) -> None: ...


class NoMetrics:
    """`BatcherMetrics` that records nothing."""

    def batch_closed(self, size: int, reason: str) -> None:
        pass

    def queue_wait(self, seconds: float) -> None:
        pass

    def queue_depth(self, depth: int) -> None:
        pass

    def inference(self, seconds: float) -> None:
        pass

    def solo_batch(self) -> None:
        pass


@dataclass(frozen=True)
class Failed:
    """In ``run_batch``'s outputs, in one item's place: that item alone fails with ``error`` (an image that
    would not decode on the inference thread); the batch's other items get their outputs."""

    error: Exception


@dataclass(eq=False)
class Pending(Generic[In, Out]):
    """One request waiting for its output."""

    item: In
    future: asyncio.Future[Out]
    enqueued_at: float  # time.monotonic()
    deadline: float  # time.monotonic() by which inference must start; inf = none
    started: bool = field(default=False)
    times: ItemTimes | None = None  # filled with when this request waited and ran
    background: bool = False  # a stream frame: taken after interactive items, shed first
    bulk: bool = False  # a tile of a tiled request: taken after interactive items, never shed


@dataclass
class ItemTimes:
    """When one queued item waited and ran, as its batch filled them in."""

    queue_wait: float | None = None  # seconds from queued to its batch's start
    inference: float | None = None  # seconds its batch ran
    batch_started: float | None = None  # time.monotonic()
    batch_span: SpanContext | None = None  # the batch's trace span (tracing on)


@dataclass(eq=False)
class OnDeck(Generic[In, Out]):
    """A batch waiting for the first worker of a pool whose batch ends; ``handed_out`` is done once every
    waiter of it has its answer (what a drain waits for)."""

    batch: list[Pending[In, Out]]
    handed_out: asyncio.Future[None]


class BatchWorker(Generic[In, Out]):
    """Runs one batch at a time in its own thread; ``on_idle`` is called whenever a batch finishes."""

    def __init__(
        self,
        name: str,
        run_batch: Callable[[list[In]], Sequence[Out | Failed]],
        metrics: BatcherMetrics,
        on_idle: Callable[[], None],
        *,
        batch_times: BatchTimeModel | None = None,
        thread: str = "",
        take_next: Callable[[], OnDeck[In, Out] | None] | None = None,
    ) -> None:
        self.name = name
        self._run_batch = run_batch
        self._metrics = metrics
        self._on_idle = on_idle
        # Called on the worker's thread as a batch ends: the batch on deck to run next, if any.
        self._take_next = take_next
        suffix = f"-{thread}" if thread else ""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"infer-{name}{suffix}")
        # Shared with the other workers of a `service.runtime.batching.worker_pool.WorkerPool`.
        self.batch_times = batch_times if batch_times is not None else BatchTimeModel()
        self.idle = True
        self.running_size = 0  # images in the batch being computed (0: none)
        self.running_since = 0.0
        # Done when the batch running now has been handed out (what a drain waits for); None before the first.
        self.task: asyncio.Future[None] | None = None

    def dispatch(
        self,
        batch: list[Pending[In, Out]],
        inline: bool = False,
        handed_out: asyncio.Future[None] | None = None,
    ) -> None:
        """Start running ``batch`` (the worker must be idle); with ``inline``, run it to the end here, on
        the event loop's own thread (`service.runtime.batching.inline`), and hand out its results.
        ``handed_out``: the batch's drain future, where it has one already (a batch taken off the deck)."""
        self.idle = False
        self.running_size, self.running_since = len(batch), time.monotonic()
        if inline:
            self._run_inline(batch)
            return
        self._submit(batch, handed_out)

    def _run_inline(self, batch: list[Pending[In, Out]]) -> None:
        started = time.monotonic()
        try:
            outputs = self._run_batch([p.item for p in batch])
        except Exception as exc:
            self._done(batch, started, time.monotonic())
            self._fail(batch, exc)
            return
        self._done(batch, started, time.monotonic(), ran=_ran(outputs))
        self._deliver(batch, outputs)

    def shutdown(self) -> None:
        """Stop the thread; a batch not yet started is cancelled."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _submit(self, batch: list[Pending[In, Out]], handed_out: asyncio.Future[None] | None) -> None:
        """Run ``batch`` on the worker's thread (`_run_from`); each batch's end comes back to the event loop
        as one callback (`_finished`): no task, and no asyncio future chained to the thread's."""
        loop = asyncio.get_running_loop()
        if handed_out is None:
            handed_out = loop.create_future()
        self.task = handed_out
        try:
            running = self._executor.submit(self._run_from, loop, batch, handed_out)
        except RuntimeError:  # the executor was shut down
            now = time.monotonic()
            self._finished(batch, now, now, None, handed_out)
            return

        def never_started(future: Future[None]) -> None:
            if future.cancelled():  # shut down before the thread took it
                now = time.monotonic()
                with suppress(RuntimeError):  # the event loop is closed: nobody is waiting any more
                    loop.call_soon_threadsafe(self._finished, batch, now, now, None, handed_out)

        running.add_done_callback(never_started)

    def _run_from(
        self, loop: asyncio.AbstractEventLoop, batch: list[Pending[In, Out]], handed_out: asyncio.Future[None]
    ) -> None:
        """On the worker's thread: run ``batch``, then each batch on deck (``take_next``) as the one before
        it ends, and post each one's end to the event loop."""
        started = time.monotonic()
        while True:
            outcome: Sequence[Out | Failed] | BaseException
            try:
                outcome = self._run_batch([p.item for p in batch])
            except BaseException as exc:  # reported to every waiter of the batch (500)
                outcome = exc
            ended = time.monotonic()
            queued = self._take_next() if self._take_next is not None else None
            try:
                loop.call_soon_threadsafe(self._finished, batch, started, ended, outcome, handed_out, queued)
            except RuntimeError:  # the event loop is closed: nobody is waiting any more
                return
            if queued is None:
                return
            batch, handed_out, started = queued.batch, queued.handed_out, ended

    def _finished(
        self,
        batch: list[Pending[In, Out]],
        started: float,
        ended: float,
        outcome: Sequence[Out | Failed] | BaseException | None,
        handed_out: asyncio.Future[None],
        queued: OnDeck[In, Out] | None = None,
    ) -> None:
        """On the event loop, once the thread is done with ``batch`` (``outcome`` None: it never started);
        ``handed_out`` is done once every waiter has its answer. ``queued``: the batch on deck the thread
        went on to, started at ``ended``."""
        try:
            if outcome is None:
                self._done(batch, started, ended, ran=False)
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(
                            ServiceUnavailable(f"model {self.name!r} shut down mid-batch")
                        )
                return
            if isinstance(outcome, BaseException):
                self._done(batch, started, ended, queued=queued)
                self._fail(batch, outcome if isinstance(outcome, Exception) else RuntimeError(repr(outcome)))
                return
            # The worker is free (or on its next batch) before the results are handed out, so the next
            # batch is dispatched first (its wake-up is queued ahead of the waiters') and inference does not
            # wait on their responses.
            self._done(batch, started, ended, ran=_ran(outcome), queued=queued)
            self._deliver(batch, outcome)
        finally:
            if not handed_out.done():
                handed_out.set_result(None)

    def _deliver(self, batch: list[Pending[In, Out]], outputs: Sequence[Out | Failed]) -> None:
        if len(outputs) != len(batch):
            error = BackendError(
                f"model {self.name!r} returned {len(outputs)} results for {len(batch)} inputs"
            )
            self._fail(batch, error)
            return
        for pending, output in zip(batch, outputs, strict=True):
            if pending.future.done():
                continue
            if isinstance(output, Failed):
                pending.future.set_exception(output.error)
            else:
                pending.future.set_result(output)

    def _done(
        self,
        batch: list[Pending[In, Out]],
        started: float,
        ended: float,
        ran: bool = True,
        queued: OnDeck[In, Out] | None = None,
    ) -> None:
        """The batch is over: time it (unless nothing ran: every item failed before inference, and its
        time says nothing of a batch's) and free the worker, or mark it running ``queued`` (the batch its
        thread took off the deck at ``ended``)."""
        elapsed = ended - started
        if ran:
            self._metrics.inference(elapsed)
            self.batch_times.observe(len(batch), elapsed)
        span = tracing.current().batch(self.name, len(batch), started, ended)
        for pending in batch:
            if pending.times is not None:
                pending.times.inference = elapsed
                pending.times.batch_started = started
                pending.times.batch_span = span
        if queued is None:
            self.running_size = 0
            self.idle = True
        else:
            self.running_size, self.running_since = len(queued.batch), ended
            self.task = queued.handed_out
            started_waits(queued.batch, ended, self._metrics)
        self._on_idle()

    def _fail(self, batch: list[Pending[In, Out]], exc: Exception) -> None:
        logger.error("batcher %r: batch of %d failed: %s", self.name, len(batch), exc, exc_info=exc)
        message = (
            exc.message if isinstance(exc, ServiceError) else f"inference failed: {type(exc).__name__}: {exc}"
        )
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(BackendError(f"model {self.name!r}: {message}"))


def started_waits(batch: Sequence[Pending[In, Out]], at: float, metrics: BatcherMetrics) -> None:
    """Record how long each request of ``batch``, starting at ``at``, waited in the queue."""
    for pending in batch:
        waited = at - pending.enqueued_at
        metrics.queue_wait(waited)
        if pending.times is not None:
            pending.times.queue_wait = waited


def _ran(outputs: Sequence[object]) -> bool:
    """Whether the runtime ran at all: not when every item failed before inference (`Failed`)."""
    return not outputs or not all(isinstance(output, Failed) for output in outputs)

"""`WorkerPool` on deck: while every worker is busy the next batch waits on deck, and the first worker
thread whose batch ends starts it without a round trip through the event loop."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Sequence

import pytest

from service.errors import ServiceUnavailable
from service.runtime.batching.batch_worker import ItemTimes, NoMetrics, Pending
from service.runtime.batching.batcher import DynamicBatcher
from service.runtime.batching.worker_pool import WorkerPool


class Gates:
    """A ``run_batch`` whose batch of ``[i, ...]`` waits until item ``i``'s gate opens; it records which
    thread ran each batch, in order."""

    def __init__(self, fail: int | None = None) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.ran: list[tuple[int, str]] = []
        self.fail = fail

    def gate(self, item: int) -> threading.Event:
        return self.gates.setdefault(item, threading.Event())

    def __call__(self, items: list[int]) -> Sequence[int]:
        self.gate(items[0]).wait(5)
        self.ran.append((items[0], threading.current_thread().name))
        if items[0] == self.fail:
            raise RuntimeError(f"batch {items[0]} broke")
        return [10 * i for i in items]


class Waits(NoMetrics):
    def __init__(self) -> None:
        self.waits: list[float] = []

    def queue_wait(self, seconds: float) -> None:
        self.waits.append(seconds)


def _batch(*items: int) -> list[Pending[int, int]]:
    loop = asyncio.get_running_loop()
    return [Pending(i, loop.create_future(), time.monotonic(), math.inf, times=ItemTimes()) for i in items]


async def _until(condition: object, what: str) -> None:
    for _ in range(500):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


def _pool(run: Gates, metrics: NoMetrics | None = None, on_deck: bool = True) -> WorkerPool[int, int]:
    return WorkerPool("m", run, metrics or NoMetrics(), lambda: None, count=2, on_deck=on_deck)


def _busy_with_one_on_deck(pool: WorkerPool[int, int]) -> tuple[list[Pending[int, int]], ...]:
    """Batches of one item, 1 and 2, running on the two workers, and 3 on deck."""
    first, second, third = _batch(1), _batch(2), _batch(3)
    pool.dispatch(first)
    pool.dispatch(second)
    pool.put_on_deck(third)
    return first, second, third


def test_the_thread_whose_batch_ends_first_runs_the_batch_on_deck() -> None:
    async def scenario() -> None:
        run, metrics = Gates(), Waits()
        pool = _pool(run, metrics)
        first, second, third = _batch(1), _batch(2), _batch(3)
        assert not pool.deck_free  # both workers idle: a batch goes to one of them, not on deck
        pool.dispatch(first)
        pool.dispatch(second)
        assert pool.deck_free
        pool.put_on_deck(third)
        assert not pool.deck_free and pool.deck_size == 1
        assert len(pool.running_tasks()) == 3  # a drain waits for the batch on deck too
        with pytest.raises(RuntimeError, match="deck is taken"):
            pool.put_on_deck(_batch(4))
        run.gate(3).set()  # the batch on deck could run at once, but no worker is free
        await asyncio.sleep(0.05)
        assert [item for item, _ in run.ran] == []
        run.gate(2).set()  # the second worker's batch ends: its thread goes on to the batch on deck
        results = await asyncio.wait_for(asyncio.gather(*(p.future for p in second + third)), 5)
        assert results == [20, 30]
        assert run.ran[0][0] == 2 and run.ran[1] == (3, run.ran[0][1])  # same thread, right after
        assert pool.deck_size == 0 and not first[0].future.done()
        assert third[0].times is not None and third[0].times.queue_wait is not None
        assert len(metrics.waits) == 1  # recorded as it started, by the worker (dispatch records its own)
        run.gate(1).set()
        await asyncio.wait_for(first[0].future, 5)
        await _until(lambda: pool.all_idle, "the pool to be idle")
        pool.shutdown()

    asyncio.run(scenario())


def test_a_worker_that_freed_before_the_deck_was_filled_takes_it_from_the_loop() -> None:
    async def scenario() -> None:
        run = Gates()
        pool = _pool(run)
        _, second, third = _busy_with_one_on_deck(pool)
        # The first worker's thread ends its batch without seeing the deck, as when the batch was put
        # there between its look and the loop's hearing of the end.
        pool.workers[0]._take_next = lambda: None
        run.gate(1).set()
        run.gate(3).set()
        assert await asyncio.wait_for(third[0].future, 5) == 30
        assert [item for item, _ in run.ran] == [1, 3]
        assert pool.deck_size == 0 and not second[0].future.done()
        run.gate(2).set()
        await asyncio.wait_for(second[0].future, 5)
        pool.shutdown()

    asyncio.run(scenario())


def test_a_raising_batch_still_hands_its_thread_the_batch_on_deck() -> None:
    async def scenario() -> None:
        run = Gates(fail=1)
        pool = _pool(run)
        first, second, third = _busy_with_one_on_deck(pool)
        for item in (1, 3):
            run.gate(item).set()
        assert await asyncio.wait_for(third[0].future, 5) == 30
        with pytest.raises(Exception, match="batch 1 broke"):
            first[0].future.result()
        run.gate(2).set()
        await asyncio.wait_for(second[0].future, 5)
        pool.shutdown()

    asyncio.run(scenario())


def test_shutdown_fails_the_batch_on_deck_with_503_and_closes_the_deck() -> None:
    async def scenario() -> None:
        run = Gates()
        pool = _pool(run)
        first, second, third = _busy_with_one_on_deck(pool)
        pool.shutdown()
        with pytest.raises(ServiceUnavailable, match="shut down before this request ran"):
            third[0].future.result()
        assert not pool.deck_free and pool.deck_size == 0
        for item in (1, 2):
            run.gate(item).set()
        await asyncio.wait_for(asyncio.gather(first[0].future, second[0].future), 5)
        assert [item for item, _ in sorted(run.ran)] == [1, 2]  # nothing taken off a closed deck

    asyncio.run(scenario())


def test_a_pool_without_a_deck_or_with_one_worker_never_offers_it() -> None:
    async def scenario() -> None:
        run = Gates()
        off = _pool(run, on_deck=False)
        one: WorkerPool[int, int] = WorkerPool("m", run, NoMetrics(), lambda: None, count=1, on_deck=True)
        off.dispatch(_batch(1))
        off.dispatch(_batch(2))
        one.dispatch(_batch(3))
        assert not off.deck_free and not one.deck_free
        for item in (1, 2, 3):
            run.gate(item).set()
        await _until(lambda: off.all_idle and one.all_idle, "the pools to be idle")
        off.shutdown()
        one.shutdown()

    asyncio.run(scenario())


class Closed(NoMetrics):
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def batch_closed(self, size: int, reason: str) -> None:
        self.reasons.append(reason)


def test_the_batcher_puts_the_next_request_on_deck_and_drains_it() -> None:
    async def scenario() -> None:
        run, metrics = Gates(), Closed()
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            "m", run, max_batch_size=1, max_queue_delay_s=0, max_queue_size=8, metrics=metrics,
            dispatch_when_idle=True, workers=2, on_deck=True,
        )  # fmt: skip
        batcher.start()
        calls = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2, 3, 4)]
        pool = batcher._worker
        await _until(lambda: pool.deck_size == 1, "a request on deck")
        assert batcher.queue_depth == 1  # the fourth waits in the queue, behind the one on deck
        run.gate(3).set()
        stopping = asyncio.ensure_future(batcher.stop(timeout=5))
        for item in (1, 2, 4):
            run.gate(item).set()
        assert await asyncio.wait_for(asyncio.gather(*calls), 5) == [10, 20, 30, 40]
        await asyncio.wait_for(stopping, 5)
        ran = dict(run.ran)
        assert ran[3] in (ran[1], ran[2])  # ran on a thread that had just ended its batch
        assert metrics.reasons.count("deck") >= 1 and len(metrics.reasons) == 4

    asyncio.run(scenario())


def test_stream_frames_never_go_on_deck() -> None:
    async def scenario() -> None:
        run = Gates()
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            "m", run, max_batch_size=1, max_queue_delay_s=0, max_queue_size=8,
            dispatch_when_idle=True, workers=2, on_deck=True,
        )  # fmt: skip
        batcher.start()
        busy = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
        pool = batcher._worker
        await _until(lambda: not pool.idle, "both workers busy")
        frame = asyncio.ensure_future(batcher.submit(5, priority="stream"))
        await asyncio.sleep(0.05)
        assert pool.deck_size == 0 and batcher.queue_depth == 1
        interactive = asyncio.ensure_future(batcher.submit(3))
        await _until(lambda: pool.deck_size == 1, "the interactive request on deck")
        for item in (1, 2, 3, 5):
            run.gate(item).set()
        assert await asyncio.wait_for(asyncio.gather(*busy, interactive, frame), 5) == [10, 20, 30, 50]
        await batcher.stop(timeout=5)

    asyncio.run(scenario())

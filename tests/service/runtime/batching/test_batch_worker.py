"""`BatchWorker`: runs one batch in its thread, hands out outputs or the batch's failure, times batches."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from service.errors import BackendError, BadRequest, ServiceUnavailable
from service.runtime.batching.batch_worker import BatchWorker, Failed, ItemTimes, NoMetrics, Pending


async def _run(
    run_batch: Callable[[list[int]], Sequence[int | Failed]], items: list[int]
) -> tuple[list[Pending[int, int]], BatchWorker[int, int]]:
    idle = asyncio.Event()
    worker: BatchWorker[int, int] = BatchWorker("m", run_batch, NoMetrics(), idle.set)
    loop = asyncio.get_running_loop()
    batch = [Pending(i, loop.create_future(), time.monotonic(), math.inf, times=ItemTimes()) for i in items]
    worker.dispatch(batch)
    assert not worker.idle and worker.running_size == len(items)
    await asyncio.wait_for(idle.wait(), 5)
    worker.shutdown()
    return batch, worker


def test_each_waiter_gets_its_output_and_the_batch_is_timed() -> None:
    def double(items: list[int]) -> Sequence[int]:
        return [2 * i for i in items]

    batch, worker = asyncio.run(_run(double, [1, 2, 3]))
    assert [p.future.result() for p in batch] == [2, 4, 6]
    assert worker.idle and worker.running_size == 0 and worker.batch_times.known
    assert all(
        p.times is not None and p.times.inference is not None and p.times.inference >= 0 for p in batch
    )


def test_an_item_failed_in_its_place_fails_that_waiter_alone_with_its_own_error() -> None:
    def odd_ones_fail(items: list[int]) -> Sequence[int | Failed]:
        return [
            Failed(BadRequest(f"item {i} is odd", field=f"images[{i}]")) if i % 2 else 2 * i for i in items
        ]

    batch, worker = asyncio.run(_run(odd_ones_fail, [1, 2, 3, 4]))
    assert [batch[1].future.result(), batch[3].future.result()] == [4, 8]
    for pending, label in ((batch[0], "images[1]"), (batch[2], "images[3]")):
        with pytest.raises(BadRequest, match="is odd") as raised:
            pending.future.result()
        assert raised.value.field == label  # the item's own error, not the batch's 500
    assert worker.idle and worker.batch_times.known


def test_a_batch_whose_every_item_failed_before_inference_is_not_timed() -> None:
    def none_decode(items: list[int]) -> Sequence[int | Failed]:
        return [Failed(BadRequest("corrupt", field="body")) for _ in items]

    batch, worker = asyncio.run(_run(none_decode, [1, 2]))
    assert all(isinstance(p.future.exception(), BadRequest) for p in batch)
    assert worker.idle and not worker.batch_times.known  # a corrupt image's instant "batch" is no batch time


def test_a_wrong_output_count_fails_every_waiter_of_the_batch() -> None:
    def short(items: list[int]) -> Sequence[int]:
        return items[:1]

    batch, _ = asyncio.run(_run(short, [1, 2]))
    for pending in batch:
        with pytest.raises(BackendError, match="returned 1 results for 2 inputs"):
            pending.future.result()


def test_a_raising_batch_fails_every_waiter_with_a_500_and_frees_the_worker() -> None:
    def broken(items: list[int]) -> Sequence[int]:
        raise ValueError("runtime fell over")

    batch, worker = asyncio.run(_run(broken, [1, 2]))
    for pending in batch:
        with pytest.raises(BackendError, match="inference failed: ValueError: runtime fell over"):
            pending.future.result()
    assert worker.idle
    assert worker.task is not None and worker.task.done()  # what a drain waits for is over too


def test_a_batch_whose_thread_was_shut_down_fails_with_503() -> None:
    async def scenario() -> list[Pending[int, int]]:
        idle = asyncio.Event()
        worker: BatchWorker[int, int] = BatchWorker("m", lambda items: items, NoMetrics(), idle.set)
        worker.shutdown()
        loop = asyncio.get_running_loop()
        batch = [Pending(1, loop.create_future(), time.monotonic(), math.inf)]
        worker.dispatch(batch)
        await asyncio.wait_for(idle.wait(), 5)
        return batch

    (pending,) = asyncio.run(scenario())
    with pytest.raises(ServiceUnavailable, match="shut down mid-batch"):
        pending.future.result()


def test_the_running_batch_is_awaitable_until_its_waiters_have_their_outputs() -> None:
    async def scenario() -> None:
        release = threading.Event()

        def slow(items: list[int]) -> Sequence[int]:
            release.wait(5)
            return items

        worker: BatchWorker[int, int] = BatchWorker("m", slow, NoMetrics(), lambda: None)
        loop = asyncio.get_running_loop()
        batch = [Pending(7, loop.create_future(), time.monotonic(), math.inf)]
        worker.dispatch(batch)
        running = worker.task
        assert running is not None and not running.done()
        release.set()
        await asyncio.wait_for(running, 5)
        assert batch[0].future.result() == 7 and worker.idle
        worker.shutdown()

    asyncio.run(scenario())

"""`InlineWork`: a lone request's batch and image work run on the event loop's thread, anything else
running sends them back to the threads, and the bounds hold."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from service.errors import BackendError
from service.runtime.admission import WorkScheduler
from service.runtime.batching.batcher import DynamicBatcher
from service.runtime.batching.inline import InlineWork


class Recorder:
    """A run_batch that records the thread of each call and can be made slow or failing."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.threads: list[int] = []
        self.fail = False

    def __call__(self, items: list[int]) -> Sequence[int]:
        self.threads.append(threading.get_ident())
        if self.seconds:
            time.sleep(self.seconds)
        if self.fail:
            raise RuntimeError("boom")
        return [2 * i for i in items]


def _batcher(run: Recorder, inline: InlineWork, name: str = "m") -> DynamicBatcher[int, int]:
    return DynamicBatcher(
        name, run, max_batch_size=4, max_queue_delay_s=0.05, max_queue_size=16, dispatch_when_idle=True,
        inline=inline,
    )  # fmt: skip


def test_a_lone_request_runs_on_the_loop_once_its_batch_time_is_known() -> None:
    async def scenario() -> tuple[list[int], int]:
        run = Recorder()
        batcher = _batcher(run, InlineWork(max_s=0.05, max_pixels=1000))
        batcher.start()
        results = [await batcher.submit(i) for i in (1, 2, 3)]
        await batcher.stop(5)
        assert results == [2, 4, 6]
        return run.threads, threading.get_ident()

    threads, loop_thread = asyncio.run(scenario())
    # The first batch runs in the worker (its time is unknown), the next ones on the loop's thread.
    assert threads[0] != loop_thread
    assert threads[1:] == [loop_thread, loop_thread]


@pytest.mark.parametrize("inline", [InlineWork(), InlineWork(max_s=0.001, max_pixels=1000)])
def test_off_or_a_batch_longer_than_the_bound_stays_in_the_worker(inline: InlineWork) -> None:
    async def scenario() -> tuple[list[int], int]:
        run = Recorder(seconds=0.01)  # fitted at ~10 ms: over a 1 ms bound
        batcher = _batcher(run, inline)
        batcher.start()
        for i in range(3):
            await batcher.submit(i)
        await batcher.stop(5)
        return run.threads, threading.get_ident()

    threads, loop_thread = asyncio.run(scenario())
    assert loop_thread not in threads


def test_concurrent_requests_and_another_busy_model_use_the_worker() -> None:
    async def scenario() -> tuple[list[int], list[int], int]:
        inline = InlineWork(max_s=0.1, max_pixels=1000)
        run, other_run = Recorder(), Recorder(seconds=0.2)
        batcher, other = _batcher(run, inline), _batcher(other_run, inline, "other")
        batcher.start()
        other.start()
        await batcher.submit(0)  # its batch time is known from here on
        await other.submit(0)
        await other.submit(0)  # other's batches (~200 ms) are over the 100 ms bound: they run in its worker
        run.threads.clear()
        # Several at once: the first batch finds the others queued behind it.
        assert await asyncio.gather(*(batcher.submit(i) for i in range(6))) == [2 * i for i in range(6)]
        concurrent = list(run.threads)
        run.threads.clear()
        busy = asyncio.ensure_future(other.submit(1))  # the other model is busy meanwhile
        await asyncio.sleep(0.05)
        assert await batcher.submit(5) == 10
        await busy
        await batcher.stop(5)
        await other.stop(5)
        return concurrent, run.threads, threading.get_ident()

    concurrent, while_other_busy, loop_thread = asyncio.run(scenario())
    assert concurrent[0] != loop_thread  # others were waiting: the worker thread
    assert while_other_busy and loop_thread not in while_other_busy


def test_a_failing_inline_batch_fails_its_request_and_the_batcher_keeps_serving() -> None:
    async def scenario() -> None:
        run = Recorder()
        batcher = _batcher(run, InlineWork(max_s=0.05, max_pixels=1000))
        batcher.start()
        assert await batcher.submit(1) == 2
        run.fail = True
        with pytest.raises(BackendError, match="boom"):
            await batcher.submit(2)
        assert run.threads[-1] == threading.get_ident()  # it failed on the loop
        run.fail = False
        assert await batcher.submit(3) == 6
        assert batcher.alive
        await batcher.stop(5)

    asyncio.run(scenario())


def test_image_work_runs_on_the_loop_only_when_small_and_nothing_else_runs() -> None:
    async def scenario() -> dict[str, int]:
        inline = InlineWork(max_s=0.05, max_pixels=1000)
        seen: dict[str, int] = {}
        with ThreadPoolExecutor(2) as executor:
            scheduler = WorkScheduler(executor, 2, inline)

            def work(name: str, seconds: float = 0.0) -> None:
                seen[name] = threading.get_ident()
                time.sleep(seconds)

            await scheduler.run(1000, work, "small")
            await scheduler.run(1001, work, "large")
            slow = asyncio.ensure_future(scheduler.run(5000, work, "slow", 0.2))
            await asyncio.sleep(0.05)
            assert inline.threads_busy == 1
            await scheduler.run(10, work, "beside a running one")
            await slow
            assert inline.threads_busy == 0
        return seen | {"loop": threading.get_ident()}

    seen = asyncio.run(scenario())
    assert seen["small"] == seen["loop"]
    assert seen["large"] != seen["loop"]
    assert seen["beside a running one"] != seen["loop"]


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        InlineWork(max_s=-1)


def test_another_request_in_flight_or_a_stream_frame_keeps_work_off_the_loop() -> None:
    in_flight = [1]

    async def scenario() -> tuple[list[int], int]:
        inline = InlineWork(max_s=0.05, max_pixels=1000, in_flight=lambda: in_flight[0], history=4)
        for _ in range(4):
            inline.arrived(1)  # four lone requests lately
        run = Recorder()
        batcher = _batcher(run, inline)
        batcher.start()
        await batcher.submit(0)  # known from here on
        assert inline.image_work(10) and inline.batch(batcher, 0.001)
        await batcher.submit(1)  # alone: on the loop
        in_flight[0] = 2
        assert not inline.image_work(10)
        await batcher.submit(2)  # another request in flight: the worker
        in_flight[0] = 1
        await batcher.submit(3, priority="stream")  # a stream frame: the worker
        await batcher.stop(5)
        return run.threads, threading.get_ident()

    threads, loop_thread = asyncio.run(scenario())
    assert threads[1] == loop_thread
    assert threads[2] != loop_thread and threads[3] != loop_thread


def test_one_overlapping_arrival_keeps_work_off_the_loop_for_the_next_requests() -> None:
    inline = InlineWork(max_s=0.05, max_pixels=1000, in_flight=lambda: 1, history=3)
    assert not inline.image_work(10)  # no history yet
    for _ in range(3):
        inline.arrived(1)
    assert inline.image_work(10)
    inline.arrived(2)  # a request arrived while another was in flight
    for expected in (False, False, False, True):  # off for the next 3
        assert inline.image_work(10) is expected
        inline.arrived(1)

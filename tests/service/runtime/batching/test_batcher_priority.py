"""DynamicBatcher priority: interactive items before stream frames; stream frames shed first under load."""

from __future__ import annotations

import asyncio

import pytest

from service.errors import QueueFull
from tests.service.runtime.batching.test_batcher import Worker, make, run, until


def test_interactive_items_fill_a_batch_before_queued_stream_frames() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=2, max_queue_delay_s=0.0)
        worker.gate.clear()
        first = asyncio.create_task(batcher.submit(0))  # occupies the worker
        await worker.wait_entered()
        frames = [asyncio.create_task(batcher.submit(100 + i, priority="stream")) for i in range(3)]
        await until(lambda: batcher.queue_depth == 3)
        interactive = [asyncio.create_task(batcher.submit(i)) for i in (1, 2)]
        await until(lambda: batcher.queue_depth == 5)
        worker.gate.set()
        assert await asyncio.gather(first, *interactive, *frames) == [0, 2, 4, 200, 202, 204]
        # The next batch after the running one holds the two interactive items, although the stream
        # frames were queued (and had filled the forming batch) before them.
        assert worker.batches[1] == [1, 2]
        assert sorted(worker.seen[3:]) == [100, 101, 102]
        await batcher.stop()

    run(scenario)


def test_an_interactive_request_sheds_queued_stream_frames_when_the_queue_is_full() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=1, max_queue_delay_s=0.0, max_queue_size=3)
        worker.gate.clear()
        first = asyncio.create_task(batcher.submit(0))
        await worker.wait_entered()
        frames = [asyncio.create_task(batcher.submit(100 + i, priority="stream")) for i in range(3)]
        await until(lambda: batcher.queue_depth == 3)
        # Full: another stream frame is refused, an interactive request gets in by shedding one.
        with pytest.raises(QueueFull):
            await batcher.submit(200, priority="stream")
        batcher.admit(1, None)  # admission sheds too, and does not raise
        interactive = asyncio.create_task(batcher.submit(1))
        await until(lambda: any(f.done() for f in frames))
        shed = [f for f in frames if f.done()]
        assert len(shed) == 1 and isinstance(shed[0].exception(), QueueFull)
        worker.gate.set()
        assert await first == 0 and await interactive == 2
        kept = [f for f in frames if f not in shed]
        assert sorted(await asyncio.gather(*kept)) == [200, 202]
        assert worker.seen[1] == 1  # the interactive request ran before the remaining frames
        await batcher.stop()

    run(scenario)


def test_interactive_expected_wait_ignores_stream_frames_queued_ahead() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=1, max_queue_delay_s=0.0, max_queue_size=64)
        assert await batcher.submit(1) == 2  # one measured batch: the wait estimate is known
        worker.gate.clear()
        first = asyncio.create_task(batcher.submit(0))
        await worker.wait_entered()
        frames = [asyncio.create_task(batcher.submit(100 + i, priority="stream")) for i in range(20)]
        await until(lambda: batcher.queue_depth == 20)
        assert batcher.expected_finish_s(1, "stream") > batcher.expected_finish_s(1, "interactive")
        worker.gate.set()
        await asyncio.gather(first, *frames)
        await batcher.stop()

    run(scenario)

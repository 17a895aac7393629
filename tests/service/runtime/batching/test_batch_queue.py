"""`BatchQueue`: interactive items before bulk items (tiles) before stream frames, frames shed first (bulk
items never), everything drained on failure."""

from __future__ import annotations

import asyncio
import math

import pytest

from service.errors import QueueFull
from service.runtime.batching.batch_queue import BatchQueue
from service.runtime.batching.batch_worker import Pending


def _pending(
    loop: asyncio.AbstractEventLoop, item: str, stream: bool = False, bulk: bool = False
) -> Pending[str, str]:
    return Pending(item, loop.create_future(), 0.0, math.inf, background=stream, bulk=bulk)


def _never(batch: list[Pending[str, str]]) -> bool:
    return False


def test_interactive_items_take_stream_frames_places_and_frames_fill_the_rest() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        queue: BatchQueue[str, str] = BatchQueue("m")
        for name in ("f1", "f2", "f3"):
            queue.append(_pending(loop, name, stream=True))
        queue.append(_pending(loop, "a"))
        assert queue.depth == 4 and queue.depth_ahead_of("interactive") == 1
        batch: list[Pending[str, str]] = []
        queue.take(batch, 3, _never)
        assert [p.item for p in batch] == ["a", "f1", "f2"]
        queue.append(_pending(loop, "b"))  # arrives while the full batch waits for the worker
        queue.take(batch, 3, _never)
        assert [p.item for p in batch] == ["a", "f1", "b"]  # f2 gave its place back
        assert [p.item for p in queue.streams] == ["f2", "f3"]
        cancelled = _pending(loop, "gone")
        cancelled.future.cancel()
        queue.append(cancelled)
        queue.take(batch, 5, _never)
        assert [p.item for p in batch] == ["a", "f1", "b", "f2", "f3"]  # the cancelled one is dropped

    asyncio.run(scenario())


def test_stream_frames_are_shed_newest_first_and_drain_empties_everything() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        queue: BatchQueue[str, str] = BatchQueue("m")
        frames = [_pending(loop, f"f{i}", stream=True) for i in range(3)]
        for frame in frames:
            queue.append(frame)
        queue.append(_pending(loop, "a"))
        queue.shed_streams(room_for=2, max_size=4)  # 4 held: two must go
        assert [p.item for p in queue.streams] == ["f0"]
        for shed in frames[1:]:
            with pytest.raises(QueueFull, match="shed for an interactive request"):
                shed.future.result()
        queue.forming.append(_pending(loop, "forming"))
        assert [p.item for p in queue.drain()] == ["forming", "a", "f0"]
        assert queue.depth == 0

    asyncio.run(scenario())


def test_tiles_come_after_interactive_items_and_before_stream_frames_and_are_never_shed() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        queue: BatchQueue[str, str] = BatchQueue("m")
        queue.append(_pending(loop, "f1", stream=True))
        for name in ("t1", "t2", "t3"):
            queue.append(_pending(loop, name, bulk=True))
        queue.append(_pending(loop, "a"))
        assert queue.depth_ahead_of("interactive") == 1
        assert queue.depth_ahead_of("bulk") == 4 and queue.depth_ahead_of("stream") == 5
        batch: list[Pending[str, str]] = []
        queue.take(batch, 3, _never)  # an interactive batch is not padded with tiles (stream frames may)
        assert [p.item for p in batch] == ["a", "f1"]
        tiles: list[Pending[str, str]] = []
        queue.take(tiles, 3, _never)  # without interactive items, tiles fill the batch before frames
        assert [p.item for p in tiles] == ["t1", "t2", "t3"]
        queue.append(_pending(loop, "b"))  # arrives while the batch of tiles waits for the worker
        queue.take(tiles, 3, _never)
        assert [p.item for p in tiles] == ["b"]  # the tiles went back, in order, to their queue's front
        assert [p.item for p in queue.bulk] == ["t1", "t2", "t3"]
        queue.append(_pending(loop, "f2", stream=True))
        queue.shed_streams(room_for=10, max_size=4)
        assert [p.item for p in queue.bulk] == ["t1", "t2", "t3"] and not queue.streams
        assert not any(p.future.done() for p in queue.bulk)

    asyncio.run(scenario())


def test_a_batch_carries_at_most_stream_limit_frames() -> None:
    """The batch an interactive request may have to wait for stays short: frames fill at most the limit."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        queue: BatchQueue[str, str] = BatchQueue("m", stream_limit=2)
        for name in ("f1", "f2", "f3"):
            queue.append(_pending(loop, name, stream=True))
        batch: list[Pending[str, str]] = []
        queue.take(batch, 8, _never)
        assert [p.item for p in batch] == ["f1", "f2"] and [p.item for p in queue.streams] == ["f3"]
        queue.append(_pending(loop, "a"))  # interactive items are not limited by it
        queue.append(_pending(loop, "b"))
        mixed: list[Pending[str, str]] = []
        queue.take(mixed, 8, _never)
        assert [p.item for p in mixed] == ["a", "b", "f3"]

    asyncio.run(scenario())

"""The requests a batcher holds before dispatch, by priority.

`BatchQueue` keeps interactive items (`/detect`, Open Inference Protocol), bulk items (the tiles of a tiled
request) and stream frames apart, and the batch being formed (taken from them, not yet dispatched).
Interactive items go into a batch first, each taking a bulk item's or a stream frame's place in a batch that
may not grow; bulk items fill the room left, then stream frames. Stream frames are shed first when an
interactive request needs room; bulk items are never shed (their request queues them a batch at a time).
`service.runtime.batching.batcher` decides when a batch closes; this module decides which requests are in it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, TypeVar

from service.errors import QueueFull
from service.runtime.batching.batch_worker import Pending

In = TypeVar("In")
Out = TypeVar("Out")

# Interactive requests go first, then bulk items (tiles), then stream frames; only stream frames are shed.
Priority = Literal["interactive", "bulk", "stream"]


def run_order(pending: Pending[In, Out]) -> int:
    """Sort key of a batch's items when only part of it runs now: interactive, then bulk, then stream."""
    return 2 if pending.background else 1 if pending.bulk else 0


class BatchQueue(Generic[In, Out]):
    """Waiting requests of one model (event-loop thread only)."""

    def __init__(self, name: str, stream_limit: int | None = None) -> None:
        self.name = name
        self.stream_limit = stream_limit  # stream frames in one batch at most (None: no limit of their own)
        self.interactive: deque[Pending[In, Out]] = deque()
        self.bulk: deque[Pending[In, Out]] = deque()  # taken after interactive items
        self.streams: deque[Pending[In, Out]] = deque()  # taken last
        self.forming: list[Pending[In, Out]] = []  # taken from the queues, not yet dispatched

    @property
    def depth(self) -> int:
        """Requests waiting to start inference (queued plus the batch being formed)."""
        return len(self.interactive) + len(self.bulk) + len(self.streams) + len(self.forming)

    def depth_ahead_of(self, priority: Priority) -> int:
        """Items that run before a new one of ``priority``: interactive items skip bulk items and stream
        frames, bulk items skip stream frames."""
        if priority == "stream":
            return self.depth
        forming = sum(1 for p in self.forming if not p.background and (priority == "bulk" or not p.bulk))
        return len(self.interactive) + (len(self.bulk) if priority == "bulk" else 0) + forming

    def append(self, pending: Pending[In, Out]) -> None:
        queue = self.streams if pending.background else self.bulk if pending.bulk else self.interactive
        queue.append(pending)

    def shed_streams(self, room_for: int, max_size: int) -> None:
        """Fail queued stream frames, the newest first (`QueueFull`: their sessions count them as dropped),
        until ``room_for`` more items fit in ``max_size``."""
        while self.streams and self.depth + room_for > max_size:
            shed = self.streams.pop()
            if not shed.future.done():
                shed.future.set_exception(
                    QueueFull(f"model {self.name!r}: stream frame shed for an interactive request")
                )

    def take(
        self, batch: list[Pending[In, Out]], limit: int, over_budget: Callable[[list[Pending[In, Out]]], bool]
    ) -> None:
        """Fill ``batch`` up to ``limit``: interactive items first, each taking a stream frame's (else a bulk
        item's) place in a batch that may not grow (full, or ``over_budget``; the item goes back to the front
        of its queue), then bulk items, then stream frames in the room left. A batch with interactive items
        carries no bulk items (tiles would only make them wait longer): those go back to their queue.
        Requests already done (cancelled, expired) are dropped."""
        while self.interactive:
            if len(batch) >= limit or over_budget(batch):
                frames = [i for i, p in enumerate(batch) if p.background]
                bulk = [i for i, p in enumerate(batch) if p.bulk]
                if frames:
                    self.streams.appendleft(batch.pop(frames[-1]))
                elif bulk:
                    self.bulk.appendleft(batch.pop(bulk[-1]))
                else:
                    break
            pending = self.interactive.popleft()
            if not pending.future.done():
                batch.append(pending)
        queues: tuple[deque[Pending[In, Out]], ...] = (self.bulk, self.streams)
        if any(not (p.bulk or p.background) for p in batch):
            for index in reversed([i for i, p in enumerate(batch) if p.bulk]):
                self.bulk.appendleft(batch.pop(index))
            queues = (self.streams,)
        for queue in queues:
            while queue and len(batch) < limit and not over_budget(batch) and self._room_for(queue, batch):
                pending = queue.popleft()
                if not pending.future.done():
                    batch.append(pending)

    def _room_for(self, queue: deque[Pending[In, Out]], batch: list[Pending[In, Out]]) -> bool:
        """Whether ``batch`` may take one more item of ``queue``: stream frames up to ``stream_limit``."""
        if queue is not self.streams or self.stream_limit is None:
            return True
        return sum(1 for p in batch if p.background) < self.stream_limit

    def drain(self) -> list[Pending[In, Out]]:
        """Every request held, removed (the batch being formed first)."""
        held = [*self.forming, *self.interactive, *self.bulk, *self.streams]
        self.forming = []
        self.interactive.clear()
        self.bulk.clear()
        self.streams.clear()
        return held

"""Fan-out of a session's events to its Server-Sent Events clients, each with a bounded buffer.

A client that reads more slowly than frames are processed loses its oldest buffered events (counted),
never slows the session or the others; a session holds at most ``max_subscribers`` clients of
``buffer`` events each. When the session stops, every client gets the end and its response finishes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from service.errors import QueueFull

# An SSE comment sent when no event came for this long, so proxies keep the connection and a client that
# left is noticed.
KEEPALIVE_S = 15.0
_END = None


class EventHub:
    """Publishes JSON events to the subscribed clients (all on the event loop)."""

    def __init__(self, max_subscribers: int, buffer: int, on_missed: Callable[[int], None]) -> None:
        self.max_subscribers = max_subscribers
        self.buffer = buffer
        self._on_missed = on_missed
        self._queues: set[asyncio.Queue[str | None]] = set()
        self._closed = False

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    def publish(self, event: dict[str, object]) -> None:
        if not self._queues:
            return
        data = json.dumps(event, separators=(",", ":"))
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
                self._on_missed(1)
            queue.put_nowait(data)

    def close(self) -> None:
        """The session ended: every client's stream ends after what it has buffered."""
        self._closed = True
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
                self._on_missed(1)
            queue.put_nowait(_END)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[AsyncIterator[str]]:
        """A client's Server-Sent Events text, chunk by chunk, for the block; `QueueFull` (429) when the
        session has ``max_subscribers`` clients already."""
        if len(self._queues) >= self.max_subscribers:
            raise QueueFull(
                f"this stream has {len(self._queues)} event clients (stream_max_subscribers); retry later",
                retry_after_s=5,
            )
        queue: asyncio.Queue[str | None] = asyncio.Queue(self.buffer)
        if self._closed:
            queue.put_nowait(_END)
        self._queues.add(queue)
        try:
            yield _sse(queue)
        finally:
            self._queues.discard(queue)


async def _sse(queue: asyncio.Queue[str | None]) -> AsyncIterator[str]:
    number = 0
    yield ": connected\n\n"
    while True:
        try:
            data = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
        except TimeoutError:
            yield ": keepalive\n\n"
            continue
        if data is _END:
            yield "event: end\ndata: {}\n\n"
            return
        number += 1
        yield f"id: {number}\nevent: frame\ndata: {data}\n\n"

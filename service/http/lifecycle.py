"""Server lifecycle: in-flight request accounting and draining for a graceful shutdown.

A request is in flight once it is admitted for inference (its body received and its cost accepted),
not while its connection is still sending the body: ``detect_in_flight_requests``, the autoscaling
signal, counts work, not connections.

Draining starts on SIGTERM (see `service.cli`): readiness fails at once so load balancers stop sending
traffic, new detect requests get 503 with Retry-After, and requests already in flight run to the end.
When they have (or the drain timeout passed), `close` aborts uploads still arriving (503), so a stalled
client cannot hold the shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from service.errors import ServiceUnavailable
from service.runtime.metrics import ServiceMetrics

logger = logging.getLogger(__name__)


class Lifecycle:
    """Counts detect requests in flight and knows whether the server is draining."""

    def __init__(self, metrics: ServiceMetrics):
        self._metrics = metrics
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False
        # Set once the drain is over: body readers still waiting give up (see `service.http.uploads`).
        self.closing = asyncio.Event()
        # Told of every request that starts, with the count in flight (`service.runtime.batching.inline`).
        self.on_start: Callable[[int], None] | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def request_started(self) -> None:
        self._in_flight += 1
        self._idle.clear()
        self._metrics.in_flight.set(self._in_flight)
        if self.on_start is not None:
            self.on_start(self._in_flight)

    def request_finished(self) -> None:
        self._in_flight -= 1
        self._metrics.in_flight.set(self._in_flight)
        if self._in_flight == 0:
            self._idle.set()

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Count the block as a request in flight; 503 if the server started draining meanwhile."""
        if self.draining:
            raise ServiceUnavailable("server is shutting down; retry on another replica", retry_after_s=1)
        self.request_started()
        try:
            yield
        finally:
            self.request_finished()

    def close(self) -> None:
        """End of the drain: uploads still arriving are refused."""
        self.closing.set()

    def begin_drain(self) -> None:
        if not self.draining:
            logger.info("draining: readiness now fails; %d request(s) in flight", self._in_flight)
        self.draining = True

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` seconds passed first."""
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

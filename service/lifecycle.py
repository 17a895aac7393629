"""Server lifecycle: in-flight request accounting and draining for a graceful shutdown.

Draining starts on SIGTERM (see `service.cli`): readiness fails at once so load balancers stop sending
traffic, new detect requests get 503 with Retry-After, and requests already in flight run to the end.
"""

from __future__ import annotations

import asyncio
import logging

from service.metrics import ServiceMetrics

logger = logging.getLogger(__name__)


class Lifecycle:
    """Counts detect requests in flight and knows whether the server is draining."""

    def __init__(self, metrics: ServiceMetrics):
        self._metrics = metrics
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def request_started(self) -> None:
        self._in_flight += 1
        self._idle.clear()
        self._metrics.in_flight.set(self._in_flight)

    def request_finished(self) -> None:
        self._in_flight -= 1
        self._metrics.in_flight.set(self._in_flight)
        if self._in_flight == 0:
            self._idle.set()

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

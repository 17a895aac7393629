"""Process-wide memory budgets: request bodies and decoded images hold at most a set number of bytes.

A `MemoryBudget` is a weighted semaphore with first-come, first-served order: a request reserves its
cost before the memory is used and releases it as soon as the memory is freed. A request that does not
fit waits (up to a timeout, in arrival order, so a large request is not starved by a stream of small
ones) and then gets 503 with a Retry-After; a request larger than the whole budget can never fit and
gets 413 at once. Peak memory is then bounded by the budgets (docs/hardening.md).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from service.errors import PayloadTooLarge, ServiceUnavailable


class MemoryBudget:
    """``capacity`` bytes shared by every request. Request paths take them with `hold`, which gives them
    back however the block ends; `acquire` and `release` are its parts."""

    def __init__(self, name: str, capacity: int):
        if capacity < 1:
            raise ValueError(f"{name} budget must be >= 1 byte, got {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def used(self) -> int:
        return self._used

    @property
    def available(self) -> int:
        return self.capacity - self._used

    def try_acquire(self, amount: int) -> bool:
        """Take ``amount`` bytes now if they fit and nobody is waiting ahead; never waits."""
        if amount <= self.available and not self._waiters:
            self._used += amount
            return True
        return False

    async def acquire(self, amount: int, timeout: float, *, field: str | None = None) -> None:
        """Take ``amount`` bytes, waiting up to ``timeout`` seconds in arrival order.

        Raises `PayloadTooLarge` when ``amount`` exceeds the whole budget, `ServiceUnavailable` (with
        Retry-After) when it did not fit in time.
        """
        if amount > self.capacity:
            raise PayloadTooLarge(
                f"this request needs {_mib(amount)} of {self.name} memory; the server's whole budget is "
                f"{_mib(self.capacity)} (send fewer or smaller images)",
                field=field,
            )
        if self.try_acquire(amount):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.release(amount)  # granted just as the caller gave up
            if isinstance(exc, TimeoutError):
                raise ServiceUnavailable(
                    f"server busy: {_mib(self.used)} of {_mib(self.capacity)} {self.name} memory in use; "
                    "retry shortly",
                    retry_after_s=max(1.0, math.ceil(timeout)),
                ) from None
            raise
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
                self._wake()

    def release(self, amount: int) -> None:
        self._used -= amount
        if self._used < 0:  # a bookkeeping bug must not turn into an unbounded budget
            raise RuntimeError(f"{self.name} budget released more than it granted")
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            amount, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.popleft()
                continue
            if amount > self.available:
                return  # first come, first served: later waiters do not overtake this one
            self._waiters.popleft()
            self._used += amount
            waiter.set_result(None)

    @asynccontextmanager
    async def hold(self, amount: int, timeout: float, *, field: str | None = None) -> AsyncIterator[None]:
        """``async with budget.hold(n, timeout):`` holds ``n`` bytes for the block, released whether it
        returns, raises or is cancelled (errors as `acquire`)."""
        await self.acquire(amount, timeout, field=field)
        try:
            yield
        finally:
            self.release(amount)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"

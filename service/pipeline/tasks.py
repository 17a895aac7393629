"""Awaiting a request's concurrent work: every image's result in order, and giving up when its caller
goes away."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from service.errors import ClientClosedRequest

T = TypeVar("T")

Gone = Callable[[], Awaitable[None]]
"""Returns once the request's caller has gone away (e.g. the HTTP client disconnected)."""


async def gather_in_order(work: Iterable[Awaitable[T]]) -> list[T]:
    """Await every item together; raise the first exception in request order, so an error names the
    first bad image rather than whichever failed first, else return the results in order."""
    results = await asyncio.gather(*work, return_exceptions=True)
    values: list[T] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        values.append(result)
    return values


async def cancel_when_gone(gone: Gone | None, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it if ``gone`` returns first (then raise `ClientClosedRequest`).

    Cancelling the work removes its queued images from their batch before any compute is spent on
    them. With ``gone`` None the work is simply awaited.
    """
    if gone is None:
        return await work
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ClientClosedRequest("client disconnected before the response was ready")
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

"""A request's concurrent work: results in request order, and cancelling it when its caller goes away."""

from __future__ import annotations

import asyncio

import pytest

from service.errors import BadRequest, ClientClosedRequest
from service.pipeline.tasks import cancel_when_gone, gather_in_order


def test_the_first_error_in_request_order_wins() -> None:
    async def image(index: int, delay: float, fails: bool) -> int:
        await asyncio.sleep(delay)
        if fails:
            raise BadRequest(f"image {index}", field=f"images[{index}]")
        return index

    async def scenario() -> None:
        assert await gather_in_order(image(i, 0, False) for i in range(3)) == [0, 1, 2]
        # images[2] fails first in time, but images[1] comes first in the request.
        work = [image(0, 0, False), image(1, 0.02, True), image(2, 0, True)]
        with pytest.raises(BadRequest, match="image 1"):
            await gather_in_order(work)

    asyncio.run(scenario())


def test_work_is_cancelled_when_the_caller_goes_away() -> None:
    async def scenario() -> None:
        gone = asyncio.Event()
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def work() -> str:
            started.set()
            try:
                await asyncio.Event().wait()  # e.g. waiting for a batch
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "never"

        task = asyncio.ensure_future(cancel_when_gone(gone.wait, work()))
        await started.wait()
        gone.set()
        with pytest.raises(ClientClosedRequest):
            await task
        assert cancelled.is_set()

    asyncio.run(scenario())


def test_finished_work_returns_its_result() -> None:
    async def scenario() -> None:
        async def work() -> str:
            return "done"

        assert await cancel_when_gone(asyncio.Event().wait, work()) == "done"
        assert await cancel_when_gone(None, work()) == "done"

    asyncio.run(scenario())

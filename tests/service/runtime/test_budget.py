"""The process-wide memory budget: first come first served, bounded waits, nothing leaked."""

from __future__ import annotations

import asyncio

import pytest

from service.errors import PayloadTooLarge, ServiceUnavailable
from service.runtime.budget import MemoryBudget


def test_acquire_waits_for_room_in_arrival_order() -> None:
    async def scenario() -> list[str]:
        budget = MemoryBudget("image", 100)
        await budget.acquire(80, 1)
        order: list[str] = []

        async def take(name: str, amount: int) -> None:
            await budget.acquire(amount, 5)
            order.append(name)

        big = asyncio.ensure_future(take("big", 60))
        await asyncio.sleep(0.01)
        small = asyncio.ensure_future(take("small", 10))  # fits now, but must not overtake "big"
        await asyncio.sleep(0.01)
        assert order == [] and budget.used == 80
        budget.release(80)
        await asyncio.gather(big, small)
        assert budget.used == 70
        return order

    assert asyncio.run(scenario()) == ["big", "small"]


def test_a_request_that_does_not_fit_in_time_gets_503_with_retry_after() -> None:
    async def scenario() -> None:
        budget = MemoryBudget("image", 100)
        await budget.acquire(100, 1)
        with pytest.raises(ServiceUnavailable, match=r"server busy: .* image memory in use") as caught:
            await budget.acquire(1, 0.05)
        assert caught.value.retry_after_s == 1
        budget.release(100)
        assert budget.used == 0 and budget.try_acquire(100)

    asyncio.run(scenario())


def test_more_than_the_whole_budget_is_413_at_once() -> None:
    async def scenario() -> None:
        budget = MemoryBudget("request body", 2**20)
        with pytest.raises(
            PayloadTooLarge, match=r"needs 2\.0 MiB of request body memory; .* budget is 1\.0 MiB"
        ):
            await budget.acquire(2**21, 10, field="body")

    asyncio.run(scenario())


def test_a_cancelled_waiter_takes_nothing() -> None:
    async def scenario() -> None:
        budget = MemoryBudget("image", 10)
        await budget.acquire(10, 1)
        waiter = asyncio.ensure_future(budget.acquire(5, 5))
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        budget.release(10)
        assert budget.used == 0

    asyncio.run(scenario())


def test_releasing_more_than_granted_is_a_bug() -> None:
    budget = MemoryBudget("image", 10)
    with pytest.raises(RuntimeError, match="released more than it granted"):
        budget.release(1)


def test_a_hold_is_given_back_however_its_block_ends() -> None:
    async def scenario() -> None:
        budget = MemoryBudget("image", 100)
        async with budget.hold(60, 1):
            assert budget.used == 60
        with pytest.raises(ValueError):
            async with budget.hold(60, 1):
                raise ValueError("bad image")
        entered = asyncio.Event()

        async def held_forever() -> None:
            async with budget.hold(60, 1):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.ensure_future(held_forever())
        await entered.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert budget.used == 0

    asyncio.run(scenario())

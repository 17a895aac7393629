"""Server-Sent Events fan-out: bounded per client, a slow client loses its oldest events (counted)."""

from __future__ import annotations

import asyncio
import json

import pytest

from service.errors import QueueFull
from service.streams.events import EventHub


def test_a_slow_client_loses_the_oldest_events_and_the_end_arrives() -> None:
    async def scenario() -> None:
        missed: list[int] = []
        hub = EventHub(max_subscribers=2, buffer=3, on_missed=missed.append)
        async with hub.subscribe() as events:
            assert await anext(events) == ": connected\n\n"
            for number in range(5):
                hub.publish({"frame": number})
            hub.close()
            chunks = [chunk async for chunk in events]
        frames = [json.loads(c.split("data: ")[1]) for c in chunks if c.startswith("id: ")]
        assert [f["frame"] for f in frames] == [3, 4]  # 0, 1, 2 were dropped; the end took a place
        assert chunks[-1].startswith("event: end")
        assert sum(missed) == 3
        assert hub.subscribers == 0

    asyncio.run(scenario())


def test_clients_beyond_the_limit_are_refused() -> None:
    async def scenario() -> None:
        hub = EventHub(max_subscribers=1, buffer=2, on_missed=lambda n: None)
        async with hub.subscribe():
            with pytest.raises(QueueFull):
                async with hub.subscribe():
                    pass
        async with hub.subscribe():  # the place is free again
            pass

    asyncio.run(scenario())

"""`StreamManager`'s view of a model's detector for the detection budget: a frame goes on deck beyond the
budget whenever nothing waits for the detector, a batch running or not."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from service.runtime.batching.batcher import DynamicBatcher
from service.settings import Settings
from service.streams.manager import StreamManager
from service.streams.metrics import StreamMetrics


def test_a_frame_goes_on_deck_while_a_batch_runs_and_none_once_one_waits() -> None:
    async def scenario() -> list[int]:
        gate = threading.Event()

        def run_batch(items: list[str]) -> Sequence[str]:
            gate.wait(10)
            return items

        batcher: DynamicBatcher[str, str] = DynamicBatcher(
            "m", run_batch, max_batch_size=8, max_queue_delay_s=0.0, max_queue_size=16,
            dispatch_when_idle=True, stream_batch_size=1,
        )  # fmt: skip
        runtime: Any = SimpleNamespace(get=lambda name, version: SimpleNamespace(batcher=batcher))
        manager = StreamManager(
            Settings(), runtime, StreamMetrics(CollectorRegistry()), predictor_factory=lambda *a: None
        )
        batcher.start()
        seen = [manager._spare("m")]  # idle: a batch of frames
        try:
            running = asyncio.ensure_future(batcher.submit("running", priority="stream"))
            while batcher.queue_depth:  # until the worker took it
                await asyncio.sleep(0.001)
            seen.append(manager._spare("m"))  # running, nothing waiting: one on deck
            waiting = asyncio.ensure_future(batcher.submit("on deck", priority="stream"))
            await asyncio.sleep(0.01)
            seen.append(manager._spare("m"))  # one waits already
            gate.set()
            assert list(await asyncio.gather(running, waiting)) == ["running", "on deck"]
        finally:
            gate.set()
            await batcher.stop(timeout=5)
        return seen

    assert asyncio.run(scenario()) == [1, 1, 0]


def test_the_budget_of_each_model_is_a_gauge() -> None:
    registry = CollectorRegistry()
    runtime: Any = SimpleNamespace(get=lambda name, version: None)
    manager = StreamManager(Settings(), runtime, StreamMetrics(registry), predictor_factory=lambda *a: None)
    manager._report_budget("a", 42.5)
    manager._report_budget("b", math.inf)  # not known yet: every frame detected
    assert registry.get_sample_value("detect_stream_budget_fps", {"model": "a"}) == 42.5
    assert registry.get_sample_value("detect_stream_budget_fps", {"model": "b"}) == 0.0

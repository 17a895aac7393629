"""Garbage-collector pauses: the startup heap frozen out of full collections, unfrozen on shutdown, and
every collection's pause in ``detect_gc_pause_seconds``."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from service_testkit import wait_until

from service.runtime.heap import GcPauses, freeze_startup_heap, unfreeze_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    unfreeze_heap()
    yield
    unfreeze_heap()


def pauses(registry: CollectorRegistry, generation: str) -> float:
    value = registry.get_sample_value("detect_gc_pause_seconds_count", {"generation": generation})
    return value or 0.0


def test_freeze_moves_the_live_heap_out_of_collections_until_unfrozen(unfrozen: None) -> None:
    assert gc.get_freeze_count() == 0
    kept = [[i] for i in range(1000)]  # tracked containers alive now
    frozen = freeze_startup_heap()
    assert frozen == gc.get_freeze_count() and frozen > len(kept)
    assert sum(len(gc.get_objects(generation)) for generation in range(3)) < frozen
    unfreeze_heap()
    assert gc.get_freeze_count() == 0


def test_pauses_are_observed_per_generation_while_installed() -> None:
    registry = CollectorRegistry()
    timer = GcPauses(registry)
    timer.install()
    timer.install()  # once only
    assert timer.installed
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        timer.remove()
    assert pauses(registry, "2") == 1 and pauses(registry, "0") >= 1
    assert registry.get_sample_value("detect_gc_pause_seconds_sum", {"generation": "2"}) > 0
    gc.collect(2)  # removed: not observed
    assert pauses(registry, "2") == 1


@pytest.mark.parametrize("freeze", [True, False])
def test_the_app_freezes_after_loading_and_unfreezes_on_shutdown(
    make_client: Callable[..., TestClient], toy_repo: Path, unfrozen: None, freeze: bool
) -> None:
    client = make_client(toy_repo, gc_freeze=freeze)
    assert client.portal is not None
    if freeze:  # the freeze runs in a task once loading has finished
        wait_until(lambda: gc.get_freeze_count() > 0, what="the startup heap frozen")
    else:
        client.portal.call(asyncio.sleep, 0.05)
        assert gc.get_freeze_count() == 0
    gc.collect(2)
    metrics = client.get("/metrics").text
    assert 'detect_gc_pause_seconds_count{generation="2"}' in metrics
    client.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0
    assert not client.app.state.metrics.gc_pauses.installed  # type: ignore[attr-defined]

"""The tile budget: network inputs, memory, and (for auto) time at the model's measured speed, never more
than half the request's timeout."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from service.pipeline.tile_budget import tile_budget
from service.runtime.admission import Resources
from service.runtime.batching.wait_estimate import BatchTimeModel
from service.settings import Settings


def _model(width: int, height: int, batch_times: BatchTimeModel | None = None) -> Any:
    """What `tile_budget` reads of a loaded model: its input size and its batcher's fitted batch times."""
    batcher = None if batch_times is None else SimpleNamespace(batch_times=batch_times)
    return SimpleNamespace(
        manifest=SimpleNamespace(input=SimpleNamespace(width=width, height=height)), batcher=batcher
    )


def _resources(**settings: object) -> Resources:
    with ThreadPoolExecutor(1) as executor:
        return Resources.from_settings(Settings(**settings), executor)  # type: ignore[arg-type]


def test_inputs_and_memory_bound_every_tiled_request() -> None:
    assert tile_budget(_model(256, 256), _resources()).inputs == 256  # max_tiles_per_request
    # 4 MiB of image budget: half of it holds 10 inputs of 256x256x3.
    small = tile_budget(_model(256, 256), _resources(image_memory_bytes=4 * 2**20))
    assert small.inputs == small.auto == 10 and "image_memory_bytes" in small.reason


def test_auto_plans_what_the_model_runs_in_its_time_budget_at_half_the_timeout_at_most() -> None:
    times = BatchTimeModel()
    for _ in range(4):
        times.observe(1, 0.020)  # 20 ms a tile: 50 tiles a second
        times.observe(2, 0.040)
    resources = _resources(request_timeout_ms=2_000, tiling_max_seconds=5.0)
    assert resources.tiling_max_seconds == 1.0  # half the 2 s timeout, not 5 s
    budget = tile_budget(_model(256, 256, times), resources)
    assert budget.inputs == 256 and budget.auto == 50
    assert tile_budget(_model(256, 256), resources).auto == 256  # no batch yet: no time limit known

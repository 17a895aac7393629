"""A request's network inputs through its model's batcher.

The inputs of a request are queued at once, so they can share a batch. A tiled image's (tens to hundreds of
tiles) are queued ``window`` inputs at a time, the next window once the last one is done: a single image
sent meanwhile waits for at most the one small batch of tiles that is running (two windows in flight kept
the worker busier but made batches of two windows, and a single image waited for all of it: docs/tiling.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.pipeline.tasks import gather_in_order
from service.pipeline.timing import RequestStages
from service.runtime.batching.batch_queue import Priority
from service.runtime.batching.batch_worker import ItemTimes
from service.runtime.loaded_model import BatchItem, LoadedModel

Outputs = dict[str, np.ndarray]


async def infer(
    model: LoadedModel,
    images: Sequence[BatchItem],
    deadline: float | None,
    stages: RequestStages,
    priority: Priority = "interactive",
    window: int | None = None,
) -> list[Outputs]:
    """Each network-sized image's outputs, in order (an image may be a `LazyInput`, made on the inference
    thread).

    ``deadline`` is the `time.monotonic` time by which inference must start (None: no limit);
    ``priority``: interactive requests go before stream frames (`service.runtime.batching.batcher`);
    ``window``: queue this many inputs at a time, one window after the other; None: all at once.
    """
    times = [ItemTimes() for _ in images]
    step = max(1, len(images) if window is None else window)
    outputs: list[Outputs] = []
    for start in range(0, len(images), step):  # an error or a cancellation ends it: later windows never run
        outputs += await gather_in_order(
            model.submit(images[i], deadline, times[i], priority)
            for i in range(start, min(start + step, len(images)))
        )
    for image_times in times:
        stages.batched(image_times)
    return outputs

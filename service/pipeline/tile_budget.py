"""How many network inputs one request's tiles may make (docs/tiling.md, "The tile budget").

A tile is a network input (``width x height x 3`` bytes, ~0.2 MB at 256x256), not a decoded image, so tiles
have a budget of their own instead of ``max_images_per_request``:

- ``max_tiles_per_request`` network inputs (the whole image, when it also runs, counts as one);
- at most half of ``image_memory_bytes`` in tiles (their resized inputs are held until inference);
- for ``tiling=auto`` only, at most what the model runs in ``tiling_max_seconds`` (at most half the request
  timeout) at its measured speed in batches of ``tiling_batch_size``, the size tiles run in (from the
  batch times it has observed; no limit before the first batch). Auto tiles are network-sized and grow
  only when the image needs more tiles than this.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.runtime.admission import Resources
from service.runtime.loaded_model import LoadedModel


@dataclass(frozen=True)
class TileBudget:
    inputs: int  # network inputs any tiled request may make
    auto: int  # network inputs tiling=auto plans for (also bounded by time)
    reason: str  # what bounds ``inputs``, for refusals


def tile_budget(model: LoadedModel, resources: Resources) -> TileBudget:
    spec = model.manifest.input
    input_bytes = spec.width * spec.height * 3
    by_memory = max(1, resources.image_budget.capacity // (2 * input_bytes))
    if by_memory < resources.max_tiles:
        inputs, reason = by_memory, f"half of image_memory_bytes at {input_bytes} bytes per tile"
    else:
        inputs, reason = resources.max_tiles, "max_tiles_per_request"
    rate = _tiles_per_second(model, resources.tiling_batch_size)
    # (+1e-6: 50 tiles a second for 1 s is 50 tiles, whatever the float rounding of the fitted times)
    auto = inputs if rate is None else min(inputs, max(1, int(rate * resources.tiling_max_seconds + 1e-6)))
    return TileBudget(inputs, auto, reason)


def _tiles_per_second(model: LoadedModel, batch: int) -> float | None:
    """Tiles per second in batches of ``batch`` on one worker (the fitted batch times; None before any)."""
    batcher = model.batcher
    if batcher is None or not batcher.batch_times.known:
        return None
    seconds = batcher.batch_times.seconds(batch)
    return batch / seconds if seconds > 0 else None

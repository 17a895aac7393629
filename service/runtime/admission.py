"""What a request may cost, and where its image work runs.

Every image's memory cost is known from its header before it is decoded (`service.imaging.decoding`), so a
request is admitted against the budgets first and refused early (413 over the per-request limit, 503
when the process-wide budget stays full) instead of being accepted and failing late.

Image work (decode, resize, mask encoding, drawing) runs in worker threads, but not as one shared FIFO: each
request runs its images one at a time, so concurrent requests interleave, and work on large images
(`HEAVY_PIXELS` and up) takes at most all but one of the threads, so small requests always find a thread free
while big ones decode or render. With the opt-in inline path (`service.runtime.batching.inline`), small image
work runs on the event loop itself while the service has nothing else running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from service.runtime.batching.inline import InlineWork
from service.runtime.budget import MemoryBudget
from service.settings import Settings

T = TypeVar("T")

# Bytes of working memory per decoded pixel, measured with scripts/bench/bench_hostile.py (docs/hardening.md):
# decoding holds the RGB image (3) plus the decoder's buffers; drawing holds the original, a BGR canvas
# and the encoded result; a mask's pasted bitmap and its RLE columns take about 2 per original pixel.
DECODE_BYTES_PER_PIXEL = 4
RENDER_BYTES_PER_PIXEL = 10
MASK_BYTES_PER_PIXEL = 2
# Image work on at least this many pixels goes through the heavy lane (tens of ms and up per task).
HEAVY_PIXELS = 4_000_000


class WorkScheduler:
    """Runs image work in the worker threads; heavy work never takes the last free thread."""

    def __init__(self, executor: Executor, threads: int, inline: InlineWork | None = None):
        self.executor = executor
        self._heavy = asyncio.Semaphore(max(1, threads - 1))
        self._alone = threads == 1
        self.inline = inline or InlineWork()

    async def run(self, pixels: int, work: Callable[..., T], *args: object, may_inline: bool = True) -> T:
        """``work(*args)`` in a worker thread (on the event loop when ``may_inline`` and `InlineWork`
        allow); ``pixels`` is how many pixels it touches."""
        if may_inline and self.inline.image_work(pixels):
            return work(*args)
        self.inline.threads_busy += 1
        try:
            loop = asyncio.get_running_loop()
            if pixels < HEAVY_PIXELS or self._alone:
                return await loop.run_in_executor(self.executor, work, *args)
            async with self._heavy:
                return await loop.run_in_executor(self.executor, work, *args)
        finally:
            self.inline.threads_busy -= 1


@dataclass(frozen=True)
class UploadLimits:
    """How a request body may arrive: its size, image count, timeouts, and how long it may wait for
    room in the body budget."""

    max_body_bytes: int
    max_images: int
    idle_timeout_s: float
    total_timeout_s: float
    budget_wait_s: float


@dataclass
class Resources:
    """The process-wide budgets and the image-work scheduler, shared by every request."""

    body_budget: MemoryBudget
    image_budget: MemoryBudget
    scheduler: WorkScheduler
    upload_limits: UploadLimits
    max_image_pixels: int
    max_request_pixels: int
    budget_wait_s: float
    reduced_jpeg_decode: bool
    max_tiles: int = 256  # network inputs one request's tiles may make (max_tiles_per_request)
    tiling_max_seconds: float = 5.0  # tiling=auto: tiles the model runs in this time at its throughput
    tiling_batch_size: int = 1  # tiles queued at a time, one window after the other
    decode_in_batch: bool = False  # a request's one small image is decoded on the inference thread

    @classmethod
    def from_settings(
        cls, settings: Settings, executor: Executor, inline: InlineWork | None = None
    ) -> Resources:
        wait_s = settings.admission_wait_ms / 1000
        return cls(
            body_budget=MemoryBudget("request body", settings.body_memory_bytes),
            image_budget=MemoryBudget("image", settings.image_memory_bytes),
            scheduler=WorkScheduler(executor, settings.worker_threads, inline),
            upload_limits=UploadLimits(
                max_body_bytes=settings.max_body_bytes,
                max_images=settings.max_images_per_request,
                idle_timeout_s=settings.body_idle_timeout_s,
                total_timeout_s=settings.body_timeout_s,
                budget_wait_s=wait_s,
            ),
            max_image_pixels=settings.max_image_pixels,
            max_request_pixels=settings.max_request_pixels,
            budget_wait_s=wait_s,
            reduced_jpeg_decode=settings.reduced_jpeg_decode,
            max_tiles=settings.max_tiles_per_request,
            # Half the request's time at most: the tiles of an auto request must be done before its deadline.
            tiling_max_seconds=min(settings.tiling_max_seconds, settings.request_timeout_ms / 2000),
            tiling_batch_size=settings.tiling_batch_size,
            decode_in_batch=settings.decode_in_batch,
        )

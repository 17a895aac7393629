"""Queue admission: whether a request may join a model's queue, and what the queue promises it.

`DynamicBatcher` (`service.runtime.batching.batcher`) inherits this: a request that would overfill the queue,
or that the queue as it is would keep past its deadline, is refused at once (`QueueFull`, 429 with
Retry-After). The pipeline asks before it decodes (`admit`), and the batcher again as an item is queued
(`_check_room`); what a request may cost in memory is `service.runtime.admission`'s. The wait it quotes
comes from the measured batch times (`expected_finish_s`), counting the batch on deck
(`service.runtime.batching.worker_pool`).
"""

from __future__ import annotations

import time
from typing import Generic, TypeVar

from service.errors import QueueFull
from service.runtime.batching.batch_queue import BatchQueue, Priority
from service.runtime.batching.wait_estimate import BatchTimeModel, expected_finish_s, retry_after_s
from service.runtime.batching.worker_pool import WorkerPool

In = TypeVar("In")
Out = TypeVar("Out")


class QueueAdmission(Generic[In, Out]):
    """The queue-side checks of a `DynamicBatcher`, on the attributes it sets."""

    name: str
    max_batch_size: int
    max_queue_size: int
    batch_times: BatchTimeModel
    _waiting: BatchQueue[In, Out]
    _worker: WorkerPool[In, Out]

    @property
    def queue_depth(self) -> int:
        """Requests waiting to start inference (queued plus the batch being formed)."""
        return self._waiting.depth

    def _depth_ahead_of(self, priority: Priority) -> int:
        return self._waiting.depth_ahead_of(priority)

    def retry_after_s(self) -> float:
        """A guess at when the queue will have room: the time to run what is queued now."""
        return retry_after_s(self.expected_finish_s(1), 0.0)

    def throughput(self, size: int | None = None) -> float | None:
        """Images per second in batches of ``size`` (default: full) with every worker busy, from the time that
        size took lately (`BatchTimeModel.size_seconds`: a few slow batches of another size tilt the fit)."""
        size = self.max_batch_size if size is None else size
        seconds = self.batch_times.size_seconds(size)
        if not self.batch_times.known or seconds <= 0:
            return None
        return size * len(self._worker.workers) / seconds

    def expected_finish_s(self, images: int, priority: Priority = "interactive") -> float:
        """Seconds until ``images`` queued now would be done, from the measured batch times (0: unknown)."""
        running_size, running_since = self._worker.next_free()
        return expected_finish_s(
            self.batch_times,
            queued=self._depth_ahead_of(priority) + self._worker.deck_size,
            images=images,
            max_batch_size=self.max_batch_size,
            running_size=running_size,
            running_for_s=time.monotonic() - running_since,
            workers=len(self._worker.workers),
        )

    def admit(
        self, images: int, deadline: float | None, priority: Priority = "interactive", room: int | None = None
    ) -> None:
        """Refuse at once (`QueueFull`, 429 with Retry-After) a request of ``images`` that would overfill
        the queue (taking ``room`` places in it at once: default ``images``), or that the queue as it is
        would keep from finishing by ``deadline`` (`time.monotonic`). A request with nothing ahead of it is
        always admitted: it starts at once.

        Until a batch has run the wait is unknown and only the queue size limits admission. An interactive
        request makes room by shedding queued stream frames, and waits only behind interactive items.
        """
        self._check_room(images if room is None else room, priority)
        ahead = self._depth_ahead_of(priority)
        nothing_ahead = ahead == 0 and self._worker.idle
        if deadline is None or nothing_ahead or not self.batch_times.known:
            return
        finish = self.expected_finish_s(images, priority)
        budget = deadline - time.monotonic()
        if finish > budget:
            raise QueueFull(
                f"model {self.name!r} is overloaded: {ahead} images are queued ahead and this "
                f"request would finish in ~{finish:.1f}s, past its deadline ({max(budget, 0.0):.1f}s left); "
                "retry later",
                retry_after_s=retry_after_s(finish, budget),
            )

    def _check_room(self, images: int, priority: Priority = "interactive") -> None:
        """`QueueFull` (429 with Retry-After) when ``images`` more would exceed ``max_queue_size``; an
        interactive request (and its tiles) first sheds queued stream frames (the newest ones) to make
        room."""
        if priority != "stream":
            self._waiting.shed_streams(images, self.max_queue_size)
        if self.queue_depth + images > self.max_queue_size:
            raise QueueFull(
                f"model {self.name!r} has {self.queue_depth} images waiting (max_queue_size "
                f"{self.max_queue_size}); retry later",
                retry_after_s=self.retry_after_s(),
            )

"""Running a request's work on the event loop itself while the server has nothing else to do.

Image work and inference normally run in threads (`service.runtime.admission.WorkScheduler`, each
model's `service.runtime.batching.batch_worker.BatchWorker`), so the event loop keeps accepting and parsing
requests meanwhile. Each such hand-off costs two thread wake-ups (the thread's, then the event loop's
when the result comes back). Under load those overlap with other work; on a lone request they are pure
latency, and on a small virtual machine, where waking an idle core is slow, they cost more than the
request's own CPU work outside inference (docs/cpu-inference.md, "Inline when idle").

`InlineWork` lets that work run on the event loop when the traffic has no concurrency and nothing else
is running anywhere in the service (none of the last ``history`` requests arrived while another was in
flight, no other request or stream frame in flight now, no image work in the worker threads, no batch
running or waiting on any model) and the work is bounded: image work on at most ``max_pixels`` decoded
pixels, a batch whose fitted time is at most ``max_s``. The loop is then blocked for at most about that
long; a request that arrives meanwhile waits in its socket, as it would have waited for the busy model,
and anything else running turns the thread path back on. Stream frames never run inline: frames of
several cameras arrive continuously, and a loop busy with one would not see the others arrive, so each
would find the service "idle" and they would run one by one instead of batched. ``max_s`` of 0 turns it
off (``DETECT_INLINE_MAX_MS``).

Why the traffic must have had no concurrency lately, not only now: a request that arrives while the loop
runs another inline waits in its socket unseen, so under random (Poisson) arrivals each would find the
service "idle" and run inline in turn, one by one, where the thread path would have decoded it meanwhile
and batched it with the others; measured, that raised p99 at 0.35-0.65 of capacity (docs/cpu-inference.md).
A client that waits for each answer before sending the next (concurrency 1) never overlaps and keeps the
inline path; one overlap turns it off for the next ``history`` requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

HISTORY = 32


class BusyProbe(Protocol):
    """A model's batcher, as `InlineWork` sees it."""

    @property
    def busy(self) -> bool:
        """A batch running, or requests waiting."""
        ...


class InlineWork:
    """Whether work may run on the event loop now (see the module docstring). Event-loop thread only."""

    def __init__(
        self,
        max_s: float = 0.0,
        max_pixels: int = 0,
        in_flight: Callable[[], int] | None = None,
        history: int = HISTORY,
    ):
        """``in_flight``: requests and stream frames in flight in the service (the asking one included);
        with it, `arrived` must be told of every request (None: neither is looked at)."""
        if max_s < 0 or max_pixels < 0:
            raise ValueError(f"max_s and max_pixels must be >= 0, got {max_s!r}, {max_pixels!r}")
        self.max_s = float(max_s)
        self.max_pixels = int(max_pixels)
        self._in_flight = in_flight
        self._overlapped: deque[bool] = deque(maxlen=max(1, history))  # per recent request
        self.threads_busy = 0  # image work running in the worker threads
        self._batchers: set[BusyProbe] = set()

    def arrived(self, in_flight: int) -> None:
        """A request (or stream frame) started; ``in_flight`` counts it and every other one in flight."""
        self._overlapped.append(in_flight > 1)

    @property
    def enabled(self) -> bool:
        return self.max_s > 0

    def register(self, batcher: BusyProbe) -> None:
        self._batchers.add(batcher)

    def unregister(self, batcher: BusyProbe) -> None:
        self._batchers.discard(batcher)

    def _quiet(self, besides: BusyProbe | None = None) -> bool:
        if self._in_flight is not None:
            lately = self._overlapped
            if self._in_flight() > 1 or len(lately) < (lately.maxlen or 0) or any(lately):
                return False
        return self.threads_busy == 0 and not any(b.busy for b in self._batchers if b is not besides)

    def image_work(self, pixels: int) -> bool:
        """Whether image work on ``pixels`` decoded pixels may run on the loop now."""
        return self.enabled and pixels <= self.max_pixels and self._quiet()

    def batch(self, batcher: BusyProbe, seconds: float) -> bool:
        """Whether ``batcher``'s next batch, expected to take ``seconds`` (0: unknown), may run on the loop
        now; the caller has already taken the batch, so ``batcher`` itself is not asked."""
        return self.enabled and 0 < seconds <= self.max_s and self._quiet(besides=batcher)

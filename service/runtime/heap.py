"""Short garbage-collector pauses: the startup heap frozen out of full collections, every pause timed.

CPython's cyclic collector stops every Python thread while it runs (it holds the GIL). A full
(generation-2) collection traverses every tracked object, and after startup the service holds ~110,000
of them (FastAPI, pydantic, numpy, the runtimes' bindings). Under wrk at concurrency 16 on the default
model, full collections came every ~6 s and took 60-90 ms each: the event loop, the decode threads and
the hand-off of results all stood still, and requests in flight got that much slower (docs/cpu-inference.md,
"Garbage-collector pauses").

``gc.freeze()`` once the models are loaded and warmed moves everything alive then into a permanent
generation that collections skip; later full collections take ~1.5 ms. Objects created afterwards are
collected as usual. Frozen objects that later become cyclic garbage stay until ``gc.unfreeze()``, which
the service calls on shutdown; a model loaded or swapped later is not frozen (`DETECT_GC_FREEZE`).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

GC_PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5)


def freeze_startup_heap() -> int:
    """Collect once, then freeze every object alive now out of later collections; the frozen count."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def unfreeze_heap() -> None:
    """Return the frozen objects to the oldest generation, so what became garbage can be collected."""
    gc.unfreeze()


class GcPauses:
    """``detect_gc_pause_seconds{generation}``: how long each collection held every Python thread.

    Timed with ``gc.callbacks`` (the callback runs with the GIL held, so collections never overlap);
    :meth:`install` on startup, :meth:`remove` on shutdown. The callback may run inside any allocation,
    so it must not wait for a lock its own thread could hold: prometheus-client holds a value's lock only
    around float arithmetic, which allocates nothing the collector tracks, so no collection starts there.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.histogram = Histogram(
            "detect_gc_pause_seconds",
            "Garbage-collector pauses (every Python thread stopped) by generation collected",
            ["generation"],
            buckets=GC_PAUSE_BUCKETS,
            registry=registry,
        )
        self._children = {generation: self.histogram.labels(str(generation)) for generation in (0, 1, 2)}
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self._children[info["generation"]].observe(time.perf_counter() - self._started)
            self._started = 0.0

    @property
    def installed(self) -> bool:
        return self._callback in gc.callbacks

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def remove(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

"""One loaded model version (`LoadedModel`): its manifest, backend and batcher, its state from pending to
stopped, the leases its requests hold (`LoadedModel.lease`) and its retirement once the last one ends
(`LoadedModel.retire`). `service.runtime.model_runtime` loads them and keeps the set that serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from contract.manifest import Manifest
from service.errors import ServiceUnavailable
from service.runtime.backends import Backend
from service.runtime.batching.batch_queue import Priority
from service.runtime.batching.batch_worker import Failed, ItemTimes
from service.runtime.batching.batcher import DynamicBatcher
from service.runtime.metrics import ModelMetrics
from service.runtime.repository import ModelEntry
from service.runtime.self_check import SelfCheckReport
from service.settings import BatchingConfig

logger = logging.getLogger(__name__)


class LazyInput(Protocol):
    """A batch item made on the inference thread just before its batch runs (an image decoded and resized
    there: `service.pipeline.detect.DecodeInBatch`)."""

    def network_input(self) -> np.ndarray:
        """The network-sized ``uint8 [H, W, 3]`` image; raises (that item alone fails) when it cannot."""
        ...


BatchItem = np.ndarray | LazyInput
Outputs = dict[str, np.ndarray]

ModelState = Literal["pending", "loading", "warming", "ready", "failed", "retiring", "stopped"]


@dataclass(frozen=True)
class ModelServing:
    """How requests to one model are handled where it differs by model, from its settings
    (`Settings.for_model`): None keeps the global setting of that name."""

    decode_in_batch: bool | None = None
    tiling: str | None = None  # its default tiling (off | auto | WIDTHxHEIGHT)


class LoadedModel:
    """One model version: manifest, backend, batcher and its state."""

    def __init__(
        self,
        entry: ModelEntry,
        batching: BatchingConfig,
        metrics: ModelMetrics,
        serving: ModelServing = ModelServing(),
    ):
        self.entry = entry
        self.batching = batching
        self.serving = serving
        self.metrics = metrics
        self.backend: Backend | None = None
        self.batcher: DynamicBatcher[BatchItem, Outputs] | None = None
        self.state: ModelState = "pending"
        self.error: str | None = None
        self.load_seconds: float | None = None
        self.self_check: SelfCheckReport | None = None  # None until checked (or its golden file is broken)
        self.warmup_seconds: dict[int, float] = {}  # batch size -> seconds, timed by the last warmup
        self.solo_warmup_seconds: float | None = None  # one image on the solo graph, if the backend has one
        self._leases = 0
        self._retired = False
        self._unleased = asyncio.Event()
        self._unleased.set()

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def version(self) -> str:
        return self.entry.version

    @property
    def manifest(self) -> Manifest:
        return self.entry.manifest

    @property
    def served_by(self) -> str | None:
        """``name:version`` of the fp32 parent answering in this version's place after a failed self-check."""
        return self.self_check.served_by if self.self_check is not None else None

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self.batcher is not None and self.batcher.alive

    def status(self) -> str:
        """ok, or what it is doing / why it does not serve."""
        if self.state == "ready" and self.batcher is not None and not self.batcher.alive:
            return f"failed: batcher stopped ({self.batcher.failure})"
        if self.state == "ready":
            return "ok"
        return f"failed: {self.error}" if self.state == "failed" else self.state

    def run_batch(self, items: list[BatchItem]) -> list[Outputs | Failed]:
        """The batcher's work function (inference thread): B images [H, W, 3] -> B output dicts. A lazy
        item is made here first; one that fails to is answered with its error (`Failed`), alone."""
        return self._run(items, solo=False)

    def run_solo(self, items: list[BatchItem]) -> list[Outputs | Failed]:
        """`run_batch` for one image on the backend's solo graph (`Backend.solo`)."""
        return self._run(items, solo=True)

    def _run(self, items: list[BatchItem], solo: bool) -> list[Outputs | Failed]:
        assert self.backend is not None
        results: list[Outputs | Failed | None] = [None] * len(items)
        images: list[np.ndarray] = []
        rows: list[int] = []
        for index, item in enumerate(items):
            if isinstance(item, np.ndarray):
                images.append(item)
            else:
                try:
                    images.append(item.network_input())
                except Exception as exc:  # that item's error, handed to its waiter
                    results[index] = Failed(exc)
                    continue
            rows.append(index)
        if images:
            batch = np.stack(images)  # B x (H, W, 3) -> (B, H, W, 3)
            outputs = self.backend.infer(batch, solo=True) if solo else self.backend.infer(batch)
            for row, index in enumerate(rows):
                results[index] = {name: value[row] for name, value in outputs.items()}
        return [result for result in results if result is not None]

    def require_ready(self) -> DynamicBatcher[BatchItem, Outputs]:
        """The batcher this version serves with; `ServiceUnavailable` (503, Retry-After) while it does
        not serve (loading, failed, batcher stopped). Every request path checks readiness here."""
        if self.batcher is None or not self.ready:
            raise ServiceUnavailable(
                f"model {self.name!r} version {self.version!r} is {self.status()}", retry_after_s=5
            )
        return self.batcher

    def admit(
        self, images: int, deadline: float | None, priority: Priority = "interactive", room: int | None = None
    ) -> None:
        """Refuse now (429 + Retry-After) ``images`` that could not be done by ``deadline`` behind the
        queue as it is, or whose ``room`` places (default ``images``) do not fit in it
        (`DynamicBatcher.admit`)."""
        self.require_ready().admit(images, deadline, priority, room)

    async def submit(
        self,
        image: BatchItem,
        deadline: float | None,
        times: ItemTimes | None = None,
        priority: Priority = "interactive",
    ) -> Outputs:
        """Queue one network-sized image (or a `LazyInput` that makes it on the inference thread); its
        outputs (batch dimension removed) once its batch ran.
        ``times`` receives when it waited and ran (`ItemTimes`); ``priority``: see `DynamicBatcher`."""
        return await self.require_ready().submit(image, deadline=deadline, times=times, priority=priority)

    @contextmanager
    def lease(self) -> Iterator[LoadedModel]:
        """Hold this version for one request: `retire` waits until every lease is returned."""
        self._leases += 1
        self._unleased.clear()
        try:
            yield self
        finally:
            self._leases -= 1
            if self._leases == 0:
                self._unleased.set()

    async def retire(self, timeout: float | None) -> None:
        """Stop serving once no request holds this version any more (at most ``timeout`` seconds),
        run what is still queued, then release the backend. Call after new requests can no longer
        resolve it."""
        if self._retired:
            return
        self._retired = True  # it keeps serving the requests that hold a lease on it
        try:
            async with asyncio.timeout(timeout):
                await self._unleased.wait()
        except TimeoutError:
            logger.warning(
                "model %s version %s: %d request(s) still running after %ss; stopping it anyway",
                self.name,
                self.version,
                self._leases,
                timeout,
            )
        self.state = "retiring"
        if self.batcher is not None:
            await self.batcher.stop(timeout)
        if self.backend is not None:
            await asyncio.to_thread(self.backend.close)
        self.state = "stopped"

    def warmup(self) -> None:
        """Run a batch of 1, a full batch and every static-shape batch size of black images on every stream
        of the runtime (a backend hands out its infer requests in turn): first runs allocate memory and pick
        kernels, so the memory a model holds is reached before it reports ready. Then time one more batch of
        each of those sizes: ``warmup_seconds``, the batcher's first batch times (`BatchTimeModel.seed`).
        The same for one image on the solo graph, if the backend has one: ``solo_warmup_seconds``."""
        assert self.backend is not None
        spec = self.manifest.input
        limit = self.batching.max_batch_size
        static = {size for size in self.backend.static_batch_sizes if size <= limit}
        sizes = sorted({1, limit} | static)
        for size in sizes:
            for _ in range(self.backend.streams):
                self.backend.infer(np.zeros((size, spec.height, spec.width, 3), dtype=np.uint8))
        timed: dict[int, float] = {}
        for size in sizes:
            images = np.zeros((size, spec.height, spec.width, 3), dtype=np.uint8)
            started = time.perf_counter()
            self.backend.infer(images)
            timed[size] = time.perf_counter() - started
        self.warmup_seconds = timed
        self.solo_warmup_seconds = None
        if self.backend.solo:
            image = np.zeros((1, spec.height, spec.width, 3), dtype=np.uint8)
            self.backend.infer(image, solo=True)
            started = time.perf_counter()
            self.backend.infer(image, solo=True)
            self.solo_warmup_seconds = time.perf_counter() - started

"""The loaded models: one backend and one batcher per model version, loaded in the background.

`ModelRuntime` is created with the repository's entries (already scanned and validated), then
`start_loading` loads each backend, warms it up and starts its batcher in a background task, so the
server answers liveness at once and readiness only when every model serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from service.backends import Backend, BackendFactory
from service.batcher import DynamicBatcher
from service.errors import ModelNotFound, ServiceUnavailable
from service.manifest import Manifest
from service.metrics import ModelMetrics, ServiceMetrics
from service.repository import ModelEntry, version_sort_key
from service.settings import BatchingConfig, Settings

logger = logging.getLogger(__name__)

ModelState = Literal["pending", "loading", "warming", "ready", "failed", "stopped"]


class LoadedModel:
    """One model version: manifest, backend, batcher and its state."""

    def __init__(self, entry: ModelEntry, batching: BatchingConfig, metrics: ModelMetrics):
        self.entry = entry
        self.batching = batching
        self.metrics = metrics
        self.backend: Backend | None = None
        self.batcher: DynamicBatcher[np.ndarray, dict[str, np.ndarray]] | None = None
        self.state: ModelState = "pending"
        self.error: str | None = None

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
    def ready(self) -> bool:
        return self.state == "ready" and self.batcher is not None and self.batcher.alive

    def status(self) -> str:
        """ok, or what it is doing / why it does not serve."""
        if self.state == "ready" and self.batcher is not None and not self.batcher.alive:
            return f"failed: batcher stopped ({self.batcher.failure})"
        if self.state == "ready":
            return "ok"
        return f"failed: {self.error}" if self.state == "failed" else self.state

    def run_batch(self, images: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """The batcher's work function (inference thread): B images [H, W, 3] -> B output dicts."""
        assert self.backend is not None
        outputs = self.backend.infer(np.stack(images))  # B x (H, W, 3) -> (B, H, W, 3)
        return [{name: value[i] for name, value in outputs.items()} for i in range(len(images))]

    def admit(self, images: int, deadline: float | None) -> None:
        """Refuse now (429 + Retry-After) ``images`` that could not be done by ``deadline`` behind the
        queue as it is (see `DynamicBatcher.admit`)."""
        if self.batcher is None or self.state != "ready":
            raise ServiceUnavailable(
                f"model {self.name!r} version {self.version!r} is {self.status()}", retry_after_s=5
            )
        self.batcher.admit(images, deadline)

    async def submit(self, image: np.ndarray, deadline: float | None) -> dict[str, np.ndarray]:
        """Queue one network-sized image; its outputs (batch dimension removed) once its batch ran."""
        if self.batcher is None or self.state != "ready":
            raise ServiceUnavailable(
                f"model {self.name!r} version {self.version!r} is {self.status()}", retry_after_s=5
            )
        return await self.batcher.submit(image, deadline=deadline)

    def warmup(self) -> None:
        """Run a batch of 1 and a full batch of black images: first runs allocate memory and pick kernels."""
        assert self.backend is not None
        spec = self.manifest.input
        for size in sorted({1, self.batching.max_batch_size}):
            self.backend.infer(np.zeros((size, spec.height, spec.width, 3), dtype=np.uint8))


def _readiness_of(model: LoadedModel) -> Callable[[], float]:
    return lambda: 1.0 if model.ready else 0.0


class ModelRuntime:
    """Every served model version, by name then version; the readiness of the whole server."""

    def __init__(
        self,
        entries: Sequence[ModelEntry],
        settings: Settings,
        metrics: ServiceMetrics,
        backend_factory: BackendFactory,
    ):
        self.settings = settings
        self._metrics = metrics
        self._factory = backend_factory
        self.models: dict[str, dict[str, LoadedModel]] = {}
        for entry in entries:
            batching = settings.batching_for(entry.name, entry.manifest.max_batch_size)
            if not entry.manifest.dynamic_batch:
                # A fixed-batch artifact always computes max_batch_size images; filling it costs nothing.
                batching = BatchingConfig(
                    entry.manifest.max_batch_size, batching.max_queue_delay_s, batching.max_queue_size
                )
            model = LoadedModel(entry, batching, metrics.for_model(entry.name))
            self.models.setdefault(entry.name, {})[entry.version] = model
            # Evaluated at every scrape, so a batcher that dies shows at once.
            metrics.model_ready.labels(model=entry.name, version=entry.version).set_function(
                _readiness_of(model)
            )
        if settings.default_model is not None and settings.default_model not in self.models:
            raise ValueError(
                f"default_model {settings.default_model!r} is not in the repository; "
                f"it has {sorted(self.models)}"
            )
        self.default_model = settings.default_model or (min(self.models) if self.models else None)
        self._task: asyncio.Task[None] | None = None
        self._loaded = asyncio.Event()

    def all(self) -> list[LoadedModel]:
        return [m for versions in self.models.values() for m in versions.values()]

    # -------------------------------------------------------------- loading

    def start_loading(self) -> None:
        """Load, warm up and start every model in a background task (call inside the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._load_all(), name="load-models")

    async def wait_loaded(self) -> None:
        """Return once every model has finished loading (ready or failed)."""
        await self._loaded.wait()

    async def _load_all(self) -> None:
        try:
            for model in self.all():
                await self._load(model)
        finally:
            self._loaded.set()

    async def _load(self, model: LoadedModel) -> None:
        started = time.monotonic()
        try:
            model.state = "loading"
            model.backend = await asyncio.to_thread(self._factory, model.entry, self.settings)
            self._metrics.model_loaded(
                model.name, model.version, model.backend.description, model.backend.inference_precision
            )
            if self.settings.warmup:
                model.state = "warming"
                await asyncio.to_thread(model.warmup)
            model.batcher = DynamicBatcher(
                f"{model.name}:{model.version}",
                model.run_batch,
                max_batch_size=model.batching.max_batch_size,
                max_queue_delay_s=model.batching.max_queue_delay_s,
                max_queue_size=model.batching.max_queue_size,
                metrics=model.metrics,
                dispatch_when_idle=self.settings.dispatch_when_idle,
            )
            model.batcher.start()
            model.state = "ready"
        except Exception as exc:
            model.state = "failed"
            model.error = f"{type(exc).__name__}: {exc}"
            logger.error(
                "model %s version %s failed to load: %s", model.name, model.version, exc, exc_info=exc
            )
        else:
            backend = model.backend.description if model.backend else "?"
            logger.info(
                "model %s version %s ready on %s in %.2fs (batch <= %d, delay %.1f ms)",
                model.name,
                model.version,
                backend,
                time.monotonic() - started,
                model.batching.max_batch_size,
                model.batching.max_queue_delay_s * 1000,
            )

    # -------------------------------------------------------------- serving

    @property
    def ready(self) -> bool:
        models = self.all()
        return bool(models) and all(m.ready for m in models)

    def status(self) -> dict[str, str]:
        """``{"name:version": "ok" | "loading" | "warming" | "failed: ..."}``."""
        return {f"{m.name}:{m.version}": m.status() for m in self.all()}

    def get(self, name: str | None, version: str | None) -> LoadedModel:
        """The model version a request asked for (None: the default model / its latest loaded version).

        Raises `ModelNotFound` naming what exists.
        """
        name = name or self.default_model
        if name is None or name not in self.models:
            raise ModelNotFound(
                f"unknown model {name!r}; this server has {sorted(self.models)}", field="model"
            )
        versions = self.models[name]
        if version is None:
            return versions[max(versions, key=version_sort_key)]
        if version not in versions:
            raise ModelNotFound(
                f"model {name!r} has no loaded version {version!r}; "
                f"loaded: {sorted(versions, key=version_sort_key)}",
                field="version",
            )
        return versions[version]

    async def stop(self, timeout: float | None) -> None:
        """Stop loading, drain every batcher (queued work runs), then release the backends."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        batchers = [m.batcher for m in self.all() if m.batcher is not None]
        await asyncio.gather(*(b.stop(timeout) for b in batchers), return_exceptions=True)
        for model in self.all():
            if model.backend is not None:
                await asyncio.to_thread(model.backend.close)
            model.state = "stopped"

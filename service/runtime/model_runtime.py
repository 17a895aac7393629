"""The loaded models: one backend and one batcher per model version, loaded in the background.

`ModelRuntime` is created with the repository's entries (already scanned and validated), then
`start_loading` loads each backend, warms it up and starts its batcher in a background task, so the
server answers liveness at once and readiness only when every model serves.

Models can also change while serving (`service.runtime.model_control`): every request holds a lease on the
model version it resolved (`LoadedModel.lease`) until it is answered, so a version that is swapped out
or unloaded is retired (`LoadedModel.retire`) only once its last request finished.

Before a version serves, its golden inputs are checked on this machine (`service.runtime.self_check`); the
outcome is `LoadedModel.self_check`, and a failure is served anyway, served by the fp32 parent, or refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace

from service.errors import BadRequest, ModelNotFound
from service.runtime.backends import BackendFactory
from service.runtime.batching.batcher import DynamicBatcher
from service.runtime.batching.inline import InlineWork
from service.runtime.default_model import no_default_message, resolve_default_model
from service.runtime.loaded_model import LoadedModel, ModelServing
from service.runtime.metrics import ServiceMetrics
from service.runtime.repository import ModelEntry, version_sort_key
from service.runtime.rollout import Rollouts
from service.runtime.self_check import SelfCheckRefused, run_self_check
from service.settings import BatchingConfig, Settings

logger = logging.getLogger(__name__)


def _info_labels(model: LoadedModel) -> tuple[str, str, str, str] | None:
    """``detect_model_info``'s labels for a loaded version: model, version, runtime, precision in effect."""
    if model.backend is None:
        return None
    return (model.name, model.version, model.backend.description, model.backend.inference_precision)


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
        inline: InlineWork | None = None,
    ):
        self.settings = settings
        self.inline = inline
        self._metrics = metrics
        self._factory = backend_factory
        self.models: dict[str, dict[str, LoadedModel]] = {}
        for entry in entries:
            model = self.new_model(entry)
            self.models.setdefault(entry.name, {})[entry.version] = model
            self.publish(model)
        metrics.loaded_models.set_function(lambda: len(self.models))
        metrics.loaded_versions.set_function(lambda: len(self.all()))
        self.default_model = resolve_default_model(
            settings.default_model, settings.model_repository, self.models
        )
        if self.default_model is None and len(self.models) > 1:
            logger.warning("no default model declared: requests must name one (%s)", sorted(self.models))
        self._task: asyncio.Task[None] | None = None
        self._loaded = asyncio.Event()
        self.rollouts = Rollouts(metrics.registry)

    def all(self) -> list[LoadedModel]:
        return [m for versions in self.models.values() for m in versions.values()]

    @property
    def metrics(self) -> ServiceMetrics:
        return self._metrics

    def new_model(self, entry: ModelEntry) -> LoadedModel:
        """A not yet loaded `LoadedModel` for ``entry``, with its batching settings resolved."""
        settings = self.settings.for_model(entry.name, entry.serving)
        batching = settings.batching_for(entry.name, entry.manifest.max_batch_size)
        if not entry.manifest.dynamic_batch:
            # A fixed-batch artifact always computes max_batch_size images; filling it costs nothing.
            batching = BatchingConfig(
                entry.manifest.max_batch_size, batching.max_queue_delay_s, batching.max_queue_size
            )
        serving = ModelServing(decode_in_batch=settings.decode_in_batch, tiling=settings.tiling)
        return LoadedModel(entry, batching, self._metrics.for_model(entry.name, entry.manifest), serving)

    def publish(self, model: LoadedModel) -> None:
        """Export ``model``'s readiness; evaluated at every scrape, so a batcher that dies shows at once."""
        self._metrics.model_ready.labels(model=model.name, version=model.version).set_function(
            _readiness_of(model)
        )
        if model.self_check is not None:  # loaded while serving: its check shows once it serves
            check = model.self_check
            self._metrics.self_checked(model.name, model.version, check.status, check.agreement)

    def unpublish(self, model: LoadedModel) -> None:
        """Drop ``model``'s readiness series, unless a version of the same number serves in its place."""
        current = self.models.get(model.name, {}).get(model.version)
        if current is None:
            with suppress(KeyError):  # never published (it failed to load)
                self._metrics.model_ready.remove(model.name, model.version)
            self._metrics.forget_self_check(model.name, model.version)
        labels = _info_labels(model)
        if labels is not None and (current is None or _info_labels(current) != labels):
            with suppress(KeyError):
                self._metrics.model_info.remove(*labels)

    async def load(self, model: LoadedModel) -> None:
        """Load, warm up and start ``model``; afterwards its state is ready or failed (with ``error``)."""
        await self._load(model)

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
            if self.settings.warmup:
                model.state = "warming"
                await asyncio.to_thread(model.warmup)
            await self._self_check(model)
            labels = _info_labels(model)
            assert labels is not None
            self._metrics.serving_info(*labels)
            model.batcher = DynamicBatcher(
                f"{model.name}:{model.version}",
                model.run_batch,
                max_batch_size=model.batching.max_batch_size,
                max_queue_delay_s=model.batching.max_queue_delay_s,
                max_queue_size=model.batching.max_queue_size,
                metrics=model.metrics,
                dispatch_when_idle=self.settings.dispatch_when_idle,
                policy=self.settings.batch_policy,
                latency_budget_s=self.settings.batch_latency_budget_ms / 1000.0,
                inline=self.inline,
                workers=model.backend.streams,
                stream_batch_size=self.settings.stream_batch_size,
                fit_predicts_sizes=model.backend.linear_batch_times,
                run_solo=model.run_solo if model.backend.solo else None,
                on_deck=self.settings.batch_on_deck,
            )
            model.batcher.batch_times.seed(model.warmup_seconds)
            if model.batcher.solo_batch_times is not None and model.solo_warmup_seconds is not None:
                model.batcher.solo_batch_times.seed({1: model.solo_warmup_seconds})
            model.batcher.start()
            model.state = "ready"
            model.load_seconds = time.monotonic() - started
            model.metrics.model_loaded(model.load_seconds)
        except Exception as exc:
            model.state = "failed"
            model.error = f"{type(exc).__name__}: {exc}"
            model.metrics.model_load_failed()
            if model.backend is not None:  # loaded but failed to warm up: free it now
                await asyncio.to_thread(model.backend.close)
                model.backend = None
            trace = None if isinstance(exc, SelfCheckRefused) else exc  # a refusal is no crash: no traceback
            logger.error(
                "model %s version %s failed to load: %s", model.name, model.version, exc, exc_info=trace
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

    async def _self_check(self, model: LoadedModel) -> None:
        """Check ``model``'s golden inputs on its backend; for a fallback, swap in (and warm up) its fp32
        parent's backend; raise `SelfCheckRefused` when it is not to be served."""
        assert model.backend is not None
        report, backend = await run_self_check(
            model.entry, model.backend, self.settings, self._factory, model.batching.max_batch_size
        )
        model.self_check = report
        if self.models.get(model.name, {}).get(model.version) is model:  # else: when published
            self._metrics.self_checked(model.name, model.version, report.status, report.agreement)
        if backend is None:
            raise SelfCheckRefused(report.detail)
        if backend is not model.backend:
            own, model.backend = model.backend, backend
            await asyncio.to_thread(own.close)
            limit = min(model.batching.max_batch_size, backend.max_batch_size)
            model.batching = replace(model.batching, max_batch_size=limit)
            if self.settings.warmup:
                await asyncio.to_thread(model.warmup)

    # -------------------------------------------------------------- serving

    @property
    def ready(self) -> bool:
        models = self.all()
        return bool(models) and all(m.ready for m in models)

    def status(self) -> dict[str, str]:
        """``{"name:version": "ok" | "loading" | "warming" | "failed: ..."}``."""
        return {f"{m.name}:{m.version}": m.status() for m in self.all()}

    def get(self, name: str | None, version: str | None, canary: bool = False) -> LoadedModel:
        """The model version a request asked for (None: the default model / its latest loaded version;
        during a rollout, its serving version, or with ``canary`` (inference) the candidate for its share).

        Raises `ModelNotFound` naming what exists.
        """
        if name is None and self.default_model is not None and self.default_model not in self.models:
            raise ModelNotFound(
                f"the default model {self.default_model!r} is not loaded (it was unloaded); name a model "
                f"with ?model= (loaded: {sorted(self.models)}) or load it again",
                field="model",
            )
        name = name or self.default_model
        if name is None:
            raise BadRequest(no_default_message(self.models), field="model")
        if name not in self.models:
            raise ModelNotFound(
                f"unknown model {name!r}; this server has {sorted(self.models)}", field="model"
            )
        versions = self.models[name]
        if version is None:
            planned = self.rollouts.version_for(name, canary)
            if planned is not None and planned in versions:
                return versions[planned]
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

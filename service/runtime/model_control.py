"""The live model repository: load, swap and unload model versions while serving.

`ModelControl.load(name)` reads ``<repository>/<name>/`` again and loads the versions the ``versions``
policy selects. Versions already serving from unchanged files are kept as they are; new or changed ones
are loaded and warmed up beside them while the old ones keep serving. Only when every new version is
ready does the model's version table change, in one assignment: requests resolved after it get the new
versions, requests already holding an old version finish on it. The versions no longer listed are then
retired in the background (`LoadedModel.retire`: their last request finishes, queued work runs, the
backend is freed). If any version fails to load, nothing that serves changes and the error says why.

`unload(name)` removes a model from serving the same way.

`start_rollout(name, candidate, ...)` loads one more version of a serving model beside the one that serves
and sets its `RolloutPlan` (canary and shadow shares, `service.runtime.rollout`); `end_rollout(name)`
undoes it in one call: the plan goes, the candidate is retired, the serving version answers everything.
A `load` of the model (which serves what the ``versions`` policy selects) ends its rollout too; polling
leaves a model under rollout alone. With ``repository_poll_s`` set, a background
task compares the folder with what serves and loads new or changed models and unloads removed ones.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from service.errors import BadRequest, ModelNotFound
from service.runtime.loaded_model import LoadedModel
from service.runtime.model_runtime import ModelRuntime
from service.runtime.repository import (
    IndexEntry,
    RepositoryError,
    check_model_name,
    index_repository,
    scan_model,
    select_versions,
)
from service.runtime.rollout import RolloutPlan
from service.settings import Settings

logger = logging.getLogger(__name__)


class LoadFailed(BadRequest):
    """A model could not be loaded; what was serving before still serves."""


@dataclass(frozen=True)
class ModelIndexRow:
    """One model version of the repository index: READY, LOADING or UNAVAILABLE (with the reason)."""

    name: str
    version: str
    state: str
    reason: str


class ModelControl:
    """Loads and unloads models of one `ModelRuntime` from its repository folder."""

    def __init__(self, runtime: ModelRuntime, settings: Settings):
        self.runtime = runtime
        self.root = settings.model_repository
        self.policy = settings.versions
        self.drain_timeout_s = settings.drain_timeout_s
        self.poll_s = settings.repository_poll_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._loading: dict[str, set[str]] = {}  # versions being loaded, by model name
        self._failures: dict[str, str] = {}  # the last failed load of each model, until one succeeds
        self._failed_stamps: dict[str, object] = {}  # polling: what the folder was when its load failed
        self._retiring: set[asyncio.Task[None]] = set()
        self._poll_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ load / unload

    async def load(self, name: str) -> list[LoadedModel]:
        """Load (or reload) model ``name`` from the repository; its serving versions, lowest first.

        Raises `LoadFailed` (400) saying why, leaving what serves untouched.
        """
        try:
            check_model_name(name)
        except RepositoryError as exc:
            raise LoadFailed(str(exc), field="model") from None
        await self.runtime.wait_loaded()  # the start-up load owns the first versions
        async with self._lock(name):
            try:
                entries = await asyncio.to_thread(scan_model, self.root, name)
            except (RepositoryError, OSError) as exc:
                self._failures[name] = str(exc)
                if (self.root / name).is_dir():  # a broken folder, not a typo: count it as a failed load
                    self.runtime.metrics.for_model(name).model_load_failed()
                raise LoadFailed(f"failed to load {name!r}: {exc}", field="model") from exc
            current = self.runtime.models.get(name, {})
            table: dict[str, LoadedModel] = {}
            fresh: list[LoadedModel] = []
            for entry in select_versions(entries, self.policy):
                old = current.get(entry.version)
                if old is not None and old.ready and old.entry == entry and old.entry.stamp == entry.stamp:
                    table[entry.version] = old  # unchanged on disk: keep serving it as it is
                else:
                    table[entry.version] = self.runtime.new_model(entry)
                    fresh.append(table[entry.version])
            await self._load_fresh(name, fresh)
            self.runtime.rollouts.clear(name)  # a load serves what the policy selects: no rollout
            self.runtime.models[name] = table  # the switch: one assignment, no await around it
            for model in fresh:
                self.runtime.publish(model)
            self._failures.pop(name, None)
            self._failed_stamps.pop(name, None)
            for model in current.values():
                if table.get(model.version) is not model:
                    self._retire(model)
            logger.info(
                "model %s now serves version(s) %s (%d newly loaded)", name, sorted(table), len(fresh)
            )
            return list(table.values())

    async def _load_fresh(self, name: str, fresh: list[LoadedModel]) -> None:
        """Load and warm up ``fresh`` one at a time (bounding memory); on failure free them and raise."""
        self._loading[name] = {m.version for m in fresh}
        try:
            for model in fresh:
                await self.runtime.load(model)
                if model.state != "ready":
                    raise LoadFailed(
                        f"failed to load {name!r} version {model.version!r}: {model.error}", field="model"
                    )
        except BaseException as exc:
            if isinstance(exc, LoadFailed):
                self._failures[name] = exc.message
            await asyncio.shield(
                asyncio.gather(*(m.retire(self.drain_timeout_s) for m in fresh), return_exceptions=True)
            )
            raise
        finally:
            self._loading.pop(name, None)

    async def unload(self, name: str) -> None:
        """Stop serving model ``name``: new requests get 404 at once, running ones finish.

        Raises `ModelNotFound` when it is neither loaded nor in the repository.
        """
        await self.runtime.wait_loaded()
        async with self._lock(name):
            versions = self.runtime.models.pop(name, None)
            self.runtime.rollouts.clear(name)
            if versions is None:
                try:
                    check_model_name(name)
                except RepositoryError as exc:
                    raise BadRequest(str(exc), field="model") from None
                if not (self.root / name).is_dir():
                    raise ModelNotFound(f"model {name!r} is not loaded and not in the repository")
                return
            for model in versions.values():
                self._retire(model)
            logger.info("model %s unloaded (version(s) %s draining)", name, sorted(versions))

    # ------------------------------------------------------------------ rollout

    async def start_rollout(
        self, name: str, candidate: str, canary_percent: float = 0.0, shadow_percent: float = 0.0
    ) -> RolloutPlan:
        """Serve ``candidate`` (a version folder of model ``name``) beside the version that answers now,
        with the given canary and shadow shares (0..100); call again to change the shares. Raises
        `LoadFailed` (400) saying why, changing nothing."""
        await self.runtime.wait_loaded()
        async with self._lock(name):
            current = self.runtime.models.get(name)
            if current is None:
                raise ModelNotFound(f"model {name!r} is not loaded: load it before rolling a version out")
            existing = self.runtime.rollouts.plans.get(name)
            serving = existing.serving if existing else self.runtime.get(name, None).version
            if candidate == serving:
                raise LoadFailed(
                    f"version {candidate!r} of {name!r} already serves; name another version",
                    field="candidate",
                )
            plan = RolloutPlan(serving, candidate, canary_percent, shadow_percent)
            if not (0 <= canary_percent <= 100 and 0 <= shadow_percent <= 100):
                raise LoadFailed(
                    "canary_percent and shadow_percent must be within 0..100", field="canary_percent"
                )
            if existing is not None and existing.candidate != candidate:
                raise LoadFailed(
                    f"{name!r} is rolling out version {existing.candidate!r}: end that rollout first",
                    field="candidate",
                )
            loaded = current.get(candidate)
            if loaded is None or not loaded.ready:
                loaded = await self._load_version(name, candidate)
                self.runtime.models[name] = {**self.runtime.models.get(name, {}), candidate: loaded}
                self.runtime.publish(loaded)
            self.runtime.rollouts.set(name, plan)
            logger.info(
                "model %s: version %s serves, candidate %s (canary %g%%, shadow %g%%)",
                name,
                serving,
                candidate,
                canary_percent,
                shadow_percent,
            )
            return plan

    async def _load_version(self, name: str, version: str) -> LoadedModel:
        try:
            entries = await asyncio.to_thread(scan_model, self.root, name)
        except (RepositoryError, OSError) as exc:
            raise LoadFailed(f"failed to read {name!r}: {exc}", field="candidate") from exc
        entry = next((e for e in entries if e.version == version), None)
        if entry is None:
            raise LoadFailed(
                f"model {name!r} has no version {version!r} in the repository "
                f"(found {[e.version for e in entries]})",
                field="candidate",
            )
        model = self.runtime.new_model(entry)
        await self._load_fresh(name, [model])
        return model

    async def end_rollout(self, name: str) -> RolloutPlan:
        """Undo ``name``'s rollout: no canary, no shadow, the candidate retired. Raises `ModelNotFound`
        when none stands."""
        async with self._lock(name):
            plan = self.runtime.rollouts.clear(name)
            if plan is None:
                raise ModelNotFound(f"model {name!r} has no rollout")
            table = dict(self.runtime.models.get(name, {}))
            retired = table.pop(plan.candidate, None)
            if retired is not None and plan.serving in table:
                self.runtime.models[name] = table
                self._retire(retired)
            logger.info("model %s: rollout of %s ended, %s serves", name, plan.candidate, plan.serving)
            return plan

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _retire(self, model: LoadedModel) -> None:
        async def retire() -> None:
            try:
                await model.retire(self.drain_timeout_s)
            finally:
                self.runtime.unpublish(model)

        task = asyncio.get_running_loop().create_task(retire(), name=f"retire-{model.name}:{model.version}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def wait_retired(self) -> None:
        """Return once every version taken out of service has been freed."""
        while self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)

    # ------------------------------------------------------------------ index

    async def index(self, ready_only: bool = False) -> list[ModelIndexRow]:
        """Every model version in the repository folder or serving, with its state."""
        try:
            found = await asyncio.to_thread(index_repository, self.root)
        except RepositoryError as exc:
            raise BadRequest(str(exc), field="model_repository") from exc
        rows: dict[tuple[str, str], ModelIndexRow] = {}
        for item in found:
            rows[(item.name, item.version)] = self._row(item)
        for model in self.runtime.all():  # serving, though its folder is gone
            rows.setdefault(
                (model.name, model.version), self._row(IndexEntry(model.name, model.version, None))
            )
        ordered = [rows[key] for key in sorted(rows)]
        return [row for row in ordered if row.state == "READY"] if ready_only else ordered

    def _row(self, item: IndexEntry) -> ModelIndexRow:
        model = self.runtime.models.get(item.name, {}).get(item.version)
        if model is not None and model.ready:
            return ModelIndexRow(item.name, item.version, "READY", "")
        if item.version in self._loading.get(item.name, set()):
            return ModelIndexRow(item.name, item.version, "LOADING", "")
        if model is not None and model.state in ("pending", "loading", "warming"):
            return ModelIndexRow(item.name, item.version, "LOADING", "")
        if model is not None:
            return ModelIndexRow(item.name, item.version, "UNAVAILABLE", model.status())
        reason = item.error or self._failures.get(item.name) or "not loaded"
        return ModelIndexRow(item.name, item.version, "UNAVAILABLE", reason)

    # ------------------------------------------------------------------ polling

    def start_polling(self) -> None:
        """Poll the repository folder every ``repository_poll_s`` seconds (no-op when unset)."""
        if self.poll_s is not None:
            self._poll_task = asyncio.get_running_loop().create_task(self._poll(), name="poll-repository")

    async def _poll(self) -> None:
        await self.runtime.wait_loaded()
        while True:
            await asyncio.sleep(self.poll_s or 0)
            try:
                await self.poll_once()
            except Exception as exc:  # a broken folder must not end polling
                logger.error("repository poll failed: %s", exc)

    async def poll_once(self) -> None:
        """Load models that are new or changed on disk, unload those whose folder is gone."""
        found = await asyncio.to_thread(index_repository, self.root)
        by_name: dict[str, list[IndexEntry]] = {}
        for item in found:
            by_name.setdefault(item.name, []).append(item)
        for name, items in by_name.items():
            stamps = tuple((i.version, i.entry.stamp if i.entry else i.error) for i in items)
            if self._failed_stamps.get(name) == stamps or not self._changed(name, items):
                continue
            try:
                await self.load(name)
            except LoadFailed as exc:
                self._failed_stamps[name] = stamps
                logger.error("repository poll: %s", exc.message)
        for name in [n for n in self.runtime.models if n not in by_name]:
            await self.unload(name)

    def _changed(self, name: str, items: list[IndexEntry]) -> bool:
        if name in self.runtime.rollouts.plans:
            return False  # a rollout decides what serves until it ends
        if any(i.entry is None for i in items):
            return True  # broken: loading reports why (once, see _failed_stamps)
        wanted = select_versions([i.entry for i in items if i.entry is not None], self.policy)
        serving = self.runtime.models.get(name, {})
        return {(e.version, e.stamp) for e in wanted} != {(v, m.entry.stamp) for v, m in serving.items()}

    async def stop(self) -> None:
        """Stop polling and wait for retiring versions (call before the runtime stops)."""
        if self._poll_task is not None:
            self._poll_task.cancel()
            await asyncio.gather(self._poll_task, return_exceptions=True)
        await self.wait_retired()

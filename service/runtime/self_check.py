"""The self-check at load: a model version's golden inputs, run on this server's CPU by the backend that
will serve them, against the detections its artifact gave where it was made (`contract.self_check`).

`run_self_check` runs once the backend is loaded and warmed up, before the version's batcher starts. Its
outcome (`SelfCheckReport`) is kept on the version (``/v1/models`` shows it as ``self_check``) and in the
``detect_model_self_check`` metrics:

- **passed**: served;
- **absent** (the manifest has no ``self_check``: an artifact made before golden inputs existed): served,
  with a WARNING saying it is unchecked;
- **failed**: what the ``self_check_failure`` setting says. ``warn`` serves it anyway (ERROR log).
  ``refuse`` fails the load with the reason (`SelfCheckRefused`): the version is not ready, and neither
  is the server, as for any failed load. ``fallback`` serves the variant's fp32 parent (``manifest.parent``)
  in its place (ERROR log).

**How fallback works.** The parent's version folder is read from the same model repository and loaded with
the same backend factory; that backend then serves under the variant's name and version (the variant's own
backend is closed). The variant keeps its batcher, leases, metrics and rollouts: only the backend its
batches run on changes, so every request path (``/detect``, the Open Inference Protocol, streams) gets the
parent's detections without routing anything. The parent is used only if it is the very file the variant
was made from (``parent.file_sha256``), takes the same input and gives the same labels and outputs, and
passes its own self-check when it carries golden inputs; otherwise, or when the variant names no parent or
the repository lacks it, fallback refuses and the reason says why. Answers then carry ``served_by``
(JSON) or ``X-Served-By`` (images, videos), and ``/v1/models`` shows ``self_check.served_by``.

Loading a second copy of the parent, rather than routing requests to a served version of it, costs the
parent's memory once more, only while a variant has failed; in exchange the parent need not be served here
(or may be served at another version), and nothing else in the request path knows about the fallback.

A golden file that is missing, truncated or written for another model version (`GoldenFileError`, naming
the file) is not a check result: it fails the load like any broken artifact.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from contract.cpu_classes import ISA_ENV, check_isa_cap, cpu_flags, effective_class
from contract.manifest import Manifest
from contract.self_check import EXPECTED_KEYS, CheckResult, compare, read_golden
from service.runtime.backends import Backend, BackendFactory
from service.runtime.repository import ModelEntry, RepositoryError, scan_version
from service.settings import Settings

logger = logging.getLogger(__name__)

Status = Literal["passed", "failed", "absent"]
Action = Literal["served", "served_anyway", "fell_back", "refused"]


class SelfCheckRefused(RuntimeError):
    """A version failed its self-check and is not served (the message says why, and why no fallback)."""


class _NoFallback(Exception):
    """Why the fp32 parent cannot serve in a failed variant's place."""


@dataclass(frozen=True)
class SelfCheckReport:
    """What the self-check of one model version found and what the server did about it."""

    status: Status
    policy: str  # the self_check_failure setting applied
    action: Action
    cpu_class: str | None  # the CPU class this process runs as (`contract.cpu_classes.effective_class`)
    detail: str  # one sentence: the result, and for a failure what was done and why
    result: CheckResult | None = None
    images: int = 0  # golden inputs run
    min_agreement: float | None = None
    reference: str | None = None  # what produced the expected detections (runtime and CPU class)
    served_by: str | None = None  # "name:version" of the parent serving in this version's place

    @property
    def agreement(self) -> float | None:
        return None if self.result is None else round(self.result.agreement, 4)

    def to_dict(self) -> dict[str, object]:
        counts = self.result.to_dict() if self.result is not None else {}
        counts.pop("passed", None)
        counts.pop("agreement", None)
        return {
            "status": self.status,
            "agreement": self.agreement,
            "min_agreement": self.min_agreement,
            **counts,
            "images": self.images,
            "cpu_class": self.cpu_class,
            "reference": self.reference,
            "policy": self.policy,
            "action": self.action,
            "served_by": self.served_by,
            "detail": self.detail,
        }


def check_isa_environment() -> None:
    """Refuse a ``ONEDNN_MAX_CPU_ISA`` that oneDNN does not know (it would ignore it silently and run another
    CPU class than the one asked for); raises `contract.cpu_classes.UnknownIsaError` listing the values."""
    value = os.environ.get(ISA_ENV)
    if value:
        check_isa_cap(value)


def check_backend(backend: Backend, directory: Path, manifest: Manifest, batch: int) -> CheckResult | None:
    """Run ``manifest``'s golden inputs (in ``directory``) through ``backend`` in batches of at most
    ``batch`` images and compare; None when the manifest has none. Raises `GoldenFileError`."""
    spec = manifest.self_check
    if spec is None:
        return None
    golden = read_golden(directory, spec, manifest.input)
    step = max(1, min(batch, backend.max_batch_size))
    parts = [backend.infer(golden.images[i : i + step]) for i in range(0, len(golden.images), step)]
    actual = {key: np.concatenate([part[key] for part in parts]) for key in EXPECTED_KEYS}
    return compare(golden.expected, actual, spec)


async def run_self_check(
    entry: ModelEntry, backend: Backend, settings: Settings, factory: BackendFactory, batch: int
) -> tuple[SelfCheckReport, Backend | None]:
    """Check ``entry`` on ``backend`` and apply ``settings.self_check_failure``: the report, and the backend
    to serve with (``backend``, the fp32 parent's for a fallback, or None when refused). The caller owns
    both backends. Raises `GoldenFileError` for a broken golden file."""
    spec = entry.manifest.self_check
    result = await asyncio.to_thread(check_backend, backend, entry.directory, entry.manifest, batch)
    policy = settings.self_check_failure
    cpu_class = effective_class(cpu_flags())
    name = f"model {entry.name} version {entry.version}"

    def report(status: Status, action: Action, detail: str, served_by: str | None = None) -> SelfCheckReport:
        return SelfCheckReport(
            status,
            policy,
            action,
            cpu_class,
            detail,
            result,
            images=spec.images if spec else 0,
            min_agreement=spec.min_agreement if spec else None,
            reference=spec.reference if spec else None,
            served_by=served_by,
        )

    if result is None or spec is None:
        detail = "the artifact carries no golden inputs (its manifest has no self_check): served unchecked"
        logger.warning("%s: %s", name, detail)
        return report("absent", "served", detail), backend
    if result.passed:
        detail = f"agreement {result.agreement:.3f} >= {spec.min_agreement} on CPU class {cpu_class}"
        logger.info("%s passed its self-check: %s (%d golden images)", name, detail, spec.images)
        return report("passed", "served", detail), backend
    failure = (
        f"self-check failed on CPU class {cpu_class}: {result.problems[0]}; expected detections from "
        f"{spec.reference}"
    )
    if policy == "warn":
        detail = f"{failure}; served anyway (self_check_failure=warn)"
        logger.error("%s: %s", name, detail)
        return report("failed", "served_anyway", detail), backend
    if policy == "fallback":
        try:
            parent, parent_backend = await _parent_backend(entry, settings, factory, batch)
        except _NoFallback as exc:
            failure = f"{failure}; no fallback: {exc}"
        else:
            detail = f"{failure}; its fp32 parent {parent} serves in its place (self_check_failure=fallback)"
            logger.error("%s: %s", name, detail)
            return report("failed", "fell_back", detail, served_by=parent), parent_backend
    return report("failed", "refused", f"{failure} (self_check_failure={policy}): not served"), None


async def _parent_backend(
    entry: ModelEntry, settings: Settings, factory: BackendFactory, batch: int
) -> tuple[str, Backend]:
    """``("name:version", backend)`` of ``entry``'s fp32 parent, loaded from the repository and checked;
    raises `_NoFallback` saying why it cannot serve in ``entry``'s place."""
    parent = entry.manifest.parent
    if parent is None:
        raise _NoFallback("the artifact names no fp32 parent")
    label = f"{parent.name}:{parent.version}"
    try:
        parent_entry = scan_version(settings.model_repository, parent.name, parent.version)
    except RepositoryError as exc:
        raise _NoFallback(f"its parent {label} cannot be read from the model repository ({exc})") from exc
    digest = await asyncio.to_thread(_sha256, parent_entry.model_path)
    if digest != parent.file_sha256:
        raise _NoFallback(
            f"the repository's {label} ({parent_entry.model_path}, sha256 {digest[:12]}...) is not the file "
            f"the variant was made from (sha256 {parent.file_sha256[:12]}...)"
        )
    mismatch = _incompatible(entry.manifest, parent_entry.manifest)
    if mismatch:
        raise _NoFallback(f"its parent {label} {mismatch}")
    try:
        backend = await asyncio.to_thread(factory, parent_entry, settings)
    except Exception as exc:
        raise _NoFallback(f"its parent {label} failed to load: {type(exc).__name__}: {exc}") from exc
    manifest = parent_entry.manifest
    try:
        result = await asyncio.to_thread(check_backend, backend, parent_entry.directory, manifest, batch)
        problem = (
            None if result is None or result.passed else f"fails its own self-check ({result.problems[0]})"
        )
    except Exception as exc:
        problem = f"cannot be checked: {type(exc).__name__}: {exc}"
    if problem is not None:
        await asyncio.to_thread(backend.close)
        raise _NoFallback(f"its parent {label} {problem}")
    return label, backend


def _incompatible(variant: Manifest, parent: Manifest) -> str | None:
    """How ``parent`` could not answer for ``variant`` (another input, labels or outputs), or None."""
    for field in ("input", "labels", "outputs", "mask_size", "max_detections"):
        if getattr(variant, field) != getattr(parent, field):
            return f"has another {field} than the variant ({getattr(parent, field)!r})"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

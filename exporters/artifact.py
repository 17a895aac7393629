"""Writing artifacts atomically, and the manifest fields every exported artifact shares.

An artifact directory (``models/<name>/<version>``) appears complete or not at all: everything is written
into a hidden temporary sibling (``.<version>.<random>.partial``, which the service's repository scan
skips) and renamed onto the target at the end; on any error the temporary directory is removed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from contract.manifest import MANIFEST_FILE, Manifest
from exporters.errors import InvalidModelError, OutputExistsError

_TOOLS = (
    "torch",
    "torchvision",
    "onnx",
    "onnxruntime",
    "onnxslim",
    "tensorrt",
    "tflite2onnx",
    "ai-edge-litert",
)


@contextlib.contextmanager
def staged_directory(target: str | Path, force: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory that replaces ``target`` when the block succeeds.

    Raises:
        OutputExistsError: ``target`` exists and ``force`` is False (checked before anything is written).
    """
    target = Path(target)
    if target.exists() and not force:
        raise OutputExistsError(f"output directory {target} already exists (use --force to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    # mkdtemp creates 0700; an artifact folder is read by the service, often as another user.
    staging.chmod(0o755)
    try:
        yield staging
        if target.exists():
            # Move the old version aside first so the target is never a mix of old and new files.
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / "previous")
            os.replace(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def name_and_version(output: str | Path, name: str | None, version: str | None) -> tuple[str, str]:
    """``models/<name>/<version>`` -> (name, version), unless given explicitly."""
    path = Path(output).resolve()
    return name or path.parent.name, version or path.name


def tool_versions() -> dict[str, str]:
    """Installed versions of the tools that shaped an artifact (absent tools are left out)."""
    versions = {"python": platform.python_version()}
    for dist in _TOOLS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        versions["detect"] = importlib.metadata.version("detect")
    return versions


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def read_artifact(artifact_dir: str | Path) -> tuple[Manifest, Path]:
    """(manifest, model file path) of an artifact directory.

    Raises:
        InvalidModelError: no such directory, no or invalid manifest, or the model file is missing.
    """
    artifact_dir = Path(artifact_dir)
    if not artifact_dir.is_dir():
        raise InvalidModelError(f"artifact directory {artifact_dir} does not exist")
    if not (artifact_dir / MANIFEST_FILE).is_file():
        raise InvalidModelError(f"{artifact_dir} has no {MANIFEST_FILE}; is it an exported artifact?")
    try:
        manifest = Manifest.read(artifact_dir)
    except Exception as exc:  # pydantic ValidationError or a JSON error
        raise InvalidModelError(f"{artifact_dir / MANIFEST_FILE} is not a valid manifest: {exc}") from exc
    model_path = artifact_dir / manifest.file
    if not model_path.is_file():
        raise InvalidModelError(f"{artifact_dir}: manifest names {manifest.file!r}, which does not exist")
    return manifest, model_path

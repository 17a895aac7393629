"""The model repository: ``<root>/<name>/<version>/{manifest.json, model.onnx | model.plan}``, and beside
a model's versions an optional ``<root>/<name>/serving.json``: how that model is served by default (the
fields of `ModelOverride`, e.g. ``{"openvino_streams": 2}``; `Settings.for_model` says what overrides it).

Scanning reads manifests only (cheap), so the CLI can reject a broken repository before starting the
server. Any inconsistency is a `RepositoryError` naming the path and what is wrong with it.

While serving, one model's folder can be scanned again (`scan_model`) to load it or a new version of it,
and the whole folder indexed without failing on a broken version (`index_repository`), as the Open
Inference Protocol's repository extension reports it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from contract.manifest import MANIFEST_FILE, Manifest
from service.settings import ModelOverride

SERVING_FILE = "serving.json"

# Allowed model file suffixes per manifest format.
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "onnx": (".onnx",),
    "tensorrt": (".plan", ".engine"),
    "openvino": (".xml",),  # OpenVINO IR: the graph, with its weights in the .bin of the same name
}


class RepositoryError(Exception):
    """The model repository is missing, empty or inconsistent; the message says where and why."""


@dataclass(frozen=True)
class ModelEntry:
    """One version of one model: its folder and its validated manifest."""

    name: str
    version: str
    directory: Path
    manifest: Manifest
    # What the files were when read: (mtime_ns, size) of the manifest and the model file. A version whose
    # stamp changed on disk is loaded again rather than reused.
    stamp: tuple[int, ...] = field(default=(), compare=False)
    # The model's serving.json (every field unset without one).
    serving: ModelOverride = field(default_factory=ModelOverride)

    @property
    def model_path(self) -> Path:
        return self.directory / self.manifest.file


# A model name is one plain folder name: no separators, no leading dot (hidden) or underscore.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_model_name(name: str) -> None:
    """Raise `RepositoryError` unless ``name`` can only mean a folder directly inside the repository."""
    if not _MODEL_NAME.fullmatch(name) or ".." in name:
        raise RepositoryError(
            f"invalid model name {name!r}: expected a folder name of letters, digits, '.', '_' or '-' "
            "(not starting with '.' or '_')"
        )


def _stamp(*paths: Path) -> tuple[int, ...]:
    stamp: list[int] = []
    for path in paths:
        info = path.stat()
        stamp += [info.st_mtime_ns, info.st_size]
    return tuple(stamp)


def version_sort_key(version: str) -> tuple[int, int, str]:
    """Numeric versions sort numerically and after non-numeric ones ("2" < "10"; "dev" < "1")."""
    return (1, int(version), "") if version.isdigit() else (0, 0, version)


def _visible_dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def _read_entry(name: str, version_dir: Path) -> ModelEntry:
    manifest_path = version_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise RepositoryError(f"{version_dir}: missing {MANIFEST_FILE}")
    try:
        manifest = Manifest.model_validate(json.loads(manifest_path.read_text()))
    except json.JSONDecodeError as exc:
        raise RepositoryError(f"{manifest_path}: not valid JSON ({exc})") from exc
    except ValidationError as exc:
        raise RepositoryError(f"{manifest_path}: does not match the manifest schema:\n{exc}") from exc
    if manifest.name != name:
        raise RepositoryError(f"{manifest_path}: name {manifest.name!r} does not match its folder {name!r}")
    if manifest.version != version_dir.name:
        raise RepositoryError(
            f"{manifest_path}: version {manifest.version!r} does not match its folder {version_dir.name!r}"
        )
    model_path = version_dir / manifest.file
    if not model_path.is_file():
        raise RepositoryError(f"{version_dir}: manifest names model file {manifest.file!r}, which is missing")
    if model_path.suffix not in _SUFFIXES[manifest.format]:
        raise RepositoryError(
            f"{model_path}: format {manifest.format!r} expects a file ending in "
            f"{' or '.join(_SUFFIXES[manifest.format])}"
        )
    weights = [model_path.with_suffix(".bin")] if manifest.format == "openvino" else []
    if weights and not weights[0].is_file():
        raise RepositoryError(f"{model_path}: OpenVINO IR without its weights {weights[0].name}")
    serving_path = version_dir.parent / SERVING_FILE
    serving = _read_serving(serving_path) if serving_path.is_file() else None
    return ModelEntry(
        name=name,
        version=version_dir.name,
        directory=version_dir,
        manifest=manifest,
        stamp=_stamp(manifest_path, model_path, *weights, *([serving_path] if serving is not None else [])),
        serving=serving or ModelOverride(),
    )


def _read_serving(path: Path) -> ModelOverride:
    try:
        return ModelOverride.model_validate(json.loads(path.read_text()))
    except json.JSONDecodeError as exc:
        raise RepositoryError(f"{path}: not valid JSON ({exc})") from exc
    except ValidationError as exc:
        raise RepositoryError(f"{path}: does not match the serving settings' schema:\n{exc}") from exc


def scan_repository(root: str | Path) -> list[ModelEntry]:
    """Every model version under ``root``, sorted by name, then version (lowest first).

    Raises `RepositoryError` if ``root`` is not a folder, holds no models, or any version is broken:
    one broken version fails the whole scan, because serving a partial repository hides the problem.
    """
    root = Path(root)
    if not root.is_dir():
        raise RepositoryError(f"model repository {str(root)!r} does not exist or is not a folder")
    entries: list[ModelEntry] = []
    for model_dir in _visible_dirs(root):
        entries += _scan_versions(model_dir)
    if not entries:
        raise RepositoryError(
            f"model repository {str(root)!r} holds no models (expected <name>/<version>/{MANIFEST_FILE})"
        )
    return entries


def select_versions(entries: list[ModelEntry], policy: Literal["latest", "all"]) -> list[ModelEntry]:
    """The entries to load: every one, or the highest version of each model."""
    if policy == "all":
        return list(entries)
    latest: dict[str, ModelEntry] = {}
    for entry in entries:  # sorted lowest version first, so the last one wins
        latest[entry.name] = entry
    return list(latest.values())


def _scan_versions(model_dir: Path) -> list[ModelEntry]:
    versions = _visible_dirs(model_dir)
    if not versions:
        raise RepositoryError(f"{model_dir}: no version folders (expected {model_dir}/<version>/)")
    return [_read_entry(model_dir.name, v) for v in sorted(versions, key=lambda p: version_sort_key(p.name))]


def scan_model(root: str | Path, name: str) -> list[ModelEntry]:
    """Every version of model ``name`` under ``root``, lowest first.

    Raises `RepositoryError` for an invalid name, a missing folder, or any broken version (loading a
    model whose folder is half-written must fail, not serve part of it).
    """
    check_model_name(name)
    model_dir = Path(root) / name
    if not model_dir.is_dir():
        raise RepositoryError(f"model {name!r} is not in the repository ({model_dir} is not a folder)")
    return _scan_versions(model_dir)


def scan_version(root: str | Path, name: str, version: str) -> ModelEntry:
    """Version ``version`` of model ``name`` under ``root``, whatever the other versions hold.

    Raises `RepositoryError` for an invalid name or version, a missing folder or a broken version.
    """
    check_model_name(name)
    if not _MODEL_NAME.fullmatch(version) or ".." in version:
        raise RepositoryError(f"invalid version {version!r}: expected a folder name")
    version_dir = Path(root) / name / version
    if not version_dir.is_dir():
        raise RepositoryError(
            f"model {name!r} version {version!r} is not in the repository ({version_dir} is not a folder)"
        )
    return _read_entry(name, version_dir)


@dataclass(frozen=True)
class IndexEntry:
    """One version folder found in the repository, or why it cannot be loaded (``error``)."""

    name: str
    version: str
    entry: ModelEntry | None
    error: str | None = None


def index_repository(root: str | Path) -> list[IndexEntry]:
    """Every model version folder under ``root`` (sorted by name, then version), broken ones included
    with the reason; a model folder without versions is listed once with version ``""``."""
    root = Path(root)
    if not root.is_dir():
        raise RepositoryError(f"model repository {str(root)!r} does not exist or is not a folder")
    index: list[IndexEntry] = []
    for model_dir in _visible_dirs(root):
        versions = sorted(_visible_dirs(model_dir), key=lambda p: version_sort_key(p.name))
        if not versions:
            index.append(IndexEntry(model_dir.name, "", None, "no version folders"))
        for version_dir in versions:
            try:
                index.append(
                    IndexEntry(model_dir.name, version_dir.name, _read_entry(model_dir.name, version_dir))
                )
            except (RepositoryError, OSError) as exc:
                index.append(IndexEntry(model_dir.name, version_dir.name, None, str(exc)))
    return index

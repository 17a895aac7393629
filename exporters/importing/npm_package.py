"""Model files that ship inside npm packages: fetched by name and version, checked, extracted.

MediaPipe's web solutions pack their models into one Emscripten data file (``*_packed_assets.data``); the
loader script beside it (``*_packed_assets_loader.js``) lists each file's byte range (``loadPackage({"files":
[{"filename", "start", "end"}]})``). ``unpack_emscripten`` reads that list; nothing of the package runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import urllib.request
from pathlib import Path

from exporters.errors import ExportError

REGISTRY = "https://registry.npmjs.org"


def tarball_url(name: str, version: str) -> str:
    """The tarball URL npm's registry gives for ``name@version`` (``@scope/pkg`` -> ``pkg-version.tgz``)."""
    return f"{REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"


def fetch_tarball(name: str, version: str, sha256: str, cache: Path) -> Path:
    """``name@version``'s tarball in ``cache`` (downloaded once), refused unless its sha256 is ``sha256``."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name.replace('/', '+')}-{version}.tgz"
    if not path.is_file():
        with urllib.request.urlopen(tarball_url(name, version), timeout=120) as response:
            data = response.read()
        _check_sha256(data, sha256, f"{name}@{version}")
        path.write_bytes(data)
    _check_sha256(path.read_bytes(), sha256, str(path))
    return path


def _check_sha256(data: bytes, expected: str, what: str) -> None:
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ExportError(f"{what}: sha256 {actual}, expected {expected}")


def read_member(tarball: Path, member: str) -> bytes:
    """One file of an npm tarball (``package/<member>``)."""
    with tarfile.open(tarball, "r:gz") as archive:
        try:
            extracted = archive.extractfile(f"package/{member}")
        except KeyError as exc:
            raise ExportError(f"{tarball.name} has no package/{member}") from exc
        if extracted is None:
            raise ExportError(f"{tarball.name}: package/{member} is not a regular file")
        return extracted.read()


_FILES = re.compile(r"loadPackage\((\{.*?\"files\".*?\})\);", re.DOTALL)


def unpack_emscripten(data: bytes, loader_js: str) -> dict[str, bytes]:
    """The files of an Emscripten packed data file, by their path in the package's virtual file system."""
    match = _FILES.search(loader_js)
    if match is None:
        raise ExportError("loader script: no loadPackage({...}) file list")
    try:
        listing = json.loads(match.group(1))
        entries = [(f["filename"], int(f["start"]), int(f["end"])) for f in listing["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"loader script: unreadable file list ({exc})") from exc
    size = listing.get("remote_package_size", len(data))
    if size != len(data):
        raise ExportError(f"packed data is {len(data)} bytes; the loader expects {size}")
    files = {}
    for filename, start, end in entries:
        if not 0 <= start <= end <= len(data):
            raise ExportError(f"loader script: {filename} at bytes {start}..{end} is outside the data")
        files[filename] = data[start:end]
    return files

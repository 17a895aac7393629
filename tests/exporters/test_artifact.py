"""Atomic artifact folders: complete or absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.artifact import name_and_version, staged_directory
from exporters.errors import OutputExistsError


def test_success_renames_staging_onto_target(tmp_path: Path) -> None:
    target = tmp_path / "models" / "m" / "1"
    with staged_directory(target) as staging:
        (staging / "model.onnx").write_text("x")
        assert not target.exists()
    assert (target / "model.onnx").read_text() == "x"
    assert oct(target.stat().st_mode & 0o777) == oct(0o755)
    assert [p.name for p in target.parent.iterdir()] == ["1"]


def test_failure_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "m" / "1"
    with pytest.raises(RuntimeError), staged_directory(target) as staging:
        (staging / "model.onnx").write_text("half")
        raise RuntimeError("export failed")
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_existing_target_needs_force_and_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "m" / "1"
    target.mkdir(parents=True)
    (target / "old.txt").write_text("old")
    with pytest.raises(OutputExistsError, match="--force"), staged_directory(target):
        pass
    with staged_directory(target, force=True) as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert [p.name for p in target.parent.iterdir()] == ["1"]


def test_name_and_version_come_from_the_path() -> None:
    assert name_and_version("models/ssd300/7", None, None) == ("ssd300", "7")
    assert name_and_version("models/ssd300/7", "other", "v2") == ("other", "v2")

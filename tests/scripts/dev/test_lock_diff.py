"""scripts/dev/lock_diff.py on the committed uv.lock and an edited copy of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version
from scripts_testkit import ROOT, load_script

lock_diff = load_script("dev/lock_diff")


def test_the_lock_pins_what_pyproject_names(tmp_path: Path) -> None:
    versions = lock_diff.locked_versions(ROOT / "uv.lock")
    assert "detect" not in versions  # the project itself is not a pin
    assert versions["uvicorn"].startswith("0.54.") and Version(versions["h11"]) >= Version("0.16")
    assert "torch" in versions and "onnxruntime" in versions and "onnxruntime-gpu" in versions


def test_changes_name_added_removed_and_moved(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (ROOT / "uv.lock").read_text()
    version = lock_diff.locked_versions(ROOT / "uv.lock")["uvicorn"]
    edited = tmp_path / "uv.lock"
    edited.write_text(
        text.replace(f'name = "uvicorn"\nversion = "{version}"', 'name = "uvicorn"\nversion = "9.9.9"')
    )
    assert lock_diff.main([str(ROOT / "uv.lock"), str(edited)]) == 0
    assert capsys.readouterr().out.strip() == f"~ uvicorn {version} -> 9.9.9"
    assert lock_diff.changes({"a": "1"}, {"b": "2"}) == ["+ b 2", "- a 1"]
    assert lock_diff.main([str(ROOT / "uv.lock"), str(ROOT / "uv.lock")]) == 0
    assert "no version changed" in capsys.readouterr().out

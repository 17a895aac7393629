"""The README as a newcomer reads it: every setting documented, every file a command names exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_settings_table() -> None:
    table = "\n".join(line for line in README.splitlines() if line.startswith("| `DETECT_"))
    documented = set(re.findall(r"`(DETECT_[A-Z0-9_]+)", table))
    expected = {f"DETECT_{name.upper()}" for name in Settings.model_fields}
    assert expected - documented == set(), "settings missing from the README's table"
    assert documented - expected == set(), "the README's table names settings that do not exist"


def test_files_the_commands_send_exist() -> None:
    sent = set(re.findall(r"@([\w./-]+)", "\n".join(re.findall(r"```sh\n(.*?)```", README, re.S))))
    assert sent, "the README sends no file"
    assert [path for path in sorted(sent) if not (ROOT / path).is_file()] == []


def test_tools_are_named_by_their_path_in_the_virtual_environment() -> None:
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", README, re.S))
    bare = [line for line in commands.splitlines() if line.split(" ", 1)[0] in scripts]
    assert bare == [], "run from the repo root, a tool is .venv/bin/<tool> (it is not on PATH)"
    assert {m for m in re.findall(r"\.venv(?:-serve)?/bin/([\w-]+)", commands) if m != "python"} <= scripts

"""The README as a newcomer reads it: the two commands, the files they send, the links into the docs.
(Every setting is documented in docs/reference/settings.md: tests/scripts/test_docs_reference.py.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_two_commands_are_there() -> None:
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", README, re.S))
    assert re.search(r"^make serve\b", commands, re.M), "the command that serves the built-in models"
    assert re.search(r"^make test\b", commands, re.M), "the command CI runs (.ci/run)"


def test_links_into_the_docs_exist() -> None:
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)", README)
    assert links, "the README links into the documentation"
    assert [link for link in links if not (ROOT / link).exists()] == []


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

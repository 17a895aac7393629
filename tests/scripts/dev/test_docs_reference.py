"""The documentation site's reference pages are the ones scripts/dev/docs_reference.py writes from the code
today, and the settings page documents every setting."""

from __future__ import annotations

import re
from pathlib import Path

from scripts_testkit import load_script

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
docs_reference = load_script("dev/docs_reference")


def test_the_committed_reference_pages_are_the_generated_ones() -> None:
    generated = docs_reference.pages()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in generated.items()
        if not path.is_file() or path.read_text() != text
    ]
    assert stale == [], "regenerate: .venv/bin/python scripts/dev/docs_reference.py"
    assert {
        path.relative_to(ROOT / "docs" / "reference" / "cli").stem
        for path in generated
        if path.parent.name == "cli"
    } == set(docs_reference.console_scripts())


def test_a_tool_with_commands_has_a_section_per_command() -> None:
    page = (ROOT / "docs" / "reference" / "cli" / "detect-export.md").read_text()
    for command in ("onnx", "verify", "quantize", "trt", "import"):
        assert f"## `detect-export {command}`" in page


def test_every_setting_is_in_the_settings_table() -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    table = "\n".join(line for line in page.splitlines() if line.startswith("| `DETECT_"))
    documented = set(re.findall(r"`(DETECT_[A-Z0-9_]+)", table))
    expected = {f"DETECT_{name.upper()}" for name in Settings.model_fields}
    assert expected - documented == set(), "settings missing from docs/reference/settings.md"
    assert documented - expected == set(), "docs/reference/settings.md names settings that do not exist"


def test_a_setting_without_a_comment_is_still_explained() -> None:
    for names, meaning in docs_reference.settings_groups():
        assert meaning, f"{names} have no comment in service/settings.py and no supplement"

"""scripts/dev/import_cycles.py: cycles are strongly connected components, and the project has none."""

from __future__ import annotations

from scripts_testkit import load_script

import_cycles = load_script("dev/import_cycles")


def test_cycles_are_strongly_connected_components_of_more_than_one_module() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    found = [sorted(c) for c in import_cycles.strongly_connected_components(edges) if len(c) > 1]
    assert found == [["a", "b", "c"]]


def test_the_project_has_no_import_cycle() -> None:
    assert import_cycles.cycles(import_cycles.DEFAULT_PACKAGES) == []

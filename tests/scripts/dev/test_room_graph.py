"""docs/architecture.md's rooms diagram is the one scripts/dev/room_graph.py draws from the code today."""

from __future__ import annotations

from pathlib import Path

from scripts_testkit import load_script

ROOT = Path(__file__).resolve().parents[3]
room_graph = load_script("dev/room_graph")


def test_the_architecture_document_draws_the_code_as_it_is() -> None:
    drawn = room_graph.mermaid(room_graph.transitive_reduction(room_graph.room_edges()))
    documented = room_graph.block_in((ROOT / "docs" / "architecture.md").read_text())
    assert documented == drawn, "regenerate: .venv/bin/python scripts/dev/room_graph.py"


def test_rooms_and_the_reduction_of_a_layered_graph() -> None:
    assert room_graph.room_of("service.runtime.backends.select") == "service.runtime"
    assert room_graph.room_of("service.app") == "service.app"
    assert room_graph.room_of("training.detectors.ssd300.model") == "training"
    edges = {("a", "b"), ("b", "c"), ("a", "c")}
    assert room_graph.transitive_reduction(edges) == {("a", "b"), ("b", "c")}
    cyclic = {("a", "b"), ("b", "a"), ("a", "c"), ("b", "c")}
    assert room_graph.transitive_reduction(cyclic) == cyclic  # a cycle is drawn in full, so it shows
    assert room_graph.block_in("no markers") == ""

"""Draw the rooms of the code and the imports between them as a Mermaid flowchart, from the code itself.

A room is a package's folder one level down (``service/runtime``, ``exporters/onnx``, ``bench/load``;
``training`` and ``contract`` stay whole); a module directly in ``service/``, ``exporters/`` or ``bench/`` is
a room of its own. An arrow ``A --> B`` means some module of A imports some module of B (grimp's graph:
every import statement, including those inside functions and under ``if TYPE_CHECKING:``). An arrow that
a longer path already implies is left out (the transitive reduction), so the picture shows the layers,
not every import.

    python scripts/dev/room_graph.py            # prints the Mermaid block
    python scripts/dev/room_graph.py --check docs/architecture.md   # exit 1 if the document's block differs

docs/architecture.md carries the block between ``<!-- rooms:begin -->`` and ``<!-- rooms:end -->``; a
test checks it is up to date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grimp

PACKAGES = ("contract", "training", "exporters", "service", "bench")
# Packages drawn whole: their inside is a plug-in layout (training/detectors/<name>/), not rooms.
WHOLE = {"contract", "training"}
BEGIN, END = "<!-- rooms:begin -->", "<!-- rooms:end -->"


def room_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] in WHOLE or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def room_edges() -> set[tuple[str, str]]:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    edges: set[tuple[str, str]] = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = room_of(module), room_of(imported)
            if source != target:
                edges.add((source, target))
    return edges


def _reaches(edges: set[tuple[str, str]], source: str, target: str) -> bool:
    seen, todo = {source}, [source]
    while todo:
        room = todo.pop()
        for a, b in edges:
            if a == room and b not in seen:
                if b == target:
                    return True
                seen.add(b)
                todo.append(b)
    return False


def transitive_reduction(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Drop each arrow whose target is reachable another way (unique for an acyclic graph)."""
    if any(_reaches(edges, b, a) for a, b in edges):
        return edges  # a cycle: draw every arrow, so it shows
    return {(a, b) for a, b in edges if not _reaches(edges - {(a, b)}, a, b)}


def _node(room: str) -> str:
    return room.replace(".", "_")


def mermaid(edges: set[tuple[str, str]]) -> str:
    rooms = sorted({room for edge in edges for room in edge})
    lines = ["```mermaid", "flowchart TD"]
    for package in PACKAGES:
        inside = [room for room in rooms if room.split(".")[0] == package]
        if package in WHOLE:
            lines.extend(f"    {_node(room)}[{room}]" for room in inside)
            continue
        lines.append(f"    subgraph {package}")
        lines.extend(f"        {_node(room)}[{room.split('.', 1)[-1]}]" for room in inside)
        lines.append("    end")
    lines.extend(f"    {_node(a)} --> {_node(b)}" for a, b in sorted(edges))
    lines.append("```")
    return "\n".join(lines)


def block_in(document: str) -> str:
    """The Mermaid block between the markers of ``document`` (stripped), or '' when there is none."""
    if BEGIN not in document or END not in document:
        return ""
    return document.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, help="a document whose rooms block must match the code")
    args = parser.parse_args(argv)
    drawn = mermaid(transitive_reduction(room_edges()))
    if args.check is None:
        print(drawn)
        return 0
    if block_in(args.check.read_text()) != drawn:
        print(f"{args.check}: the rooms diagram differs from the code; replace the block with:\n{drawn}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

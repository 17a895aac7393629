"""Import cycles among the project's own modules.

    .venv/bin/python scripts/dev/import_cycles.py [PACKAGE ...]

What it counts: the modules of the named packages (default: ``contract``, ``training``, ``exporters``,
``service``, ``bench`` and ``scripts/bench/hostile`` as ``hostile``) are the nodes of a directed graph; every
import statement that grimp finds from one of them to another is an edge, including imports inside functions
and under ``if TYPE_CHECKING:`` (a cycle hidden that way is still a cycle). External packages are left
out. A cycle is a strongly connected component (Tarjan's algorithm) of more than one module. It prints
each such component, sorted, then the total, and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PACKAGES = ("contract", "training", "exporters", "service", "bench", "hostile")


def import_graph(packages: Sequence[str]) -> dict[str, set[str]]:
    """Module -> the modules it imports, over ``packages`` (function-level and TYPE_CHECKING included)."""
    for folder in (
        ROOT / "scripts" / "bench",
        ROOT,
    ):  # `hostile` lives under scripts/bench/, not a package itself
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    # No cache: a cached graph can outlive the edits it should show.
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    return {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def strongly_connected_components(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: every strongly connected component of the graph, each sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            if successors:
                successor = successors.pop()
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, sorted(edges.get(successor, ()))))
                elif successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycles(packages: Sequence[str]) -> list[list[str]]:
    """The strongly connected components of more than one module, sorted."""
    components = strongly_connected_components(import_graph(packages))
    return sorted(component for component in components if len(component) > 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("packages", nargs="*", default=list(DEFAULT_PACKAGES))
    args = parser.parse_args(argv)
    found = cycles(args.packages)
    for number, component in enumerate(found, start=1):
        print(f"cycle {number} ({len(component)} modules):")
        for module in component:
            print(f"  {module}")
    print(f"{len(found)} import cycle(s) in {', '.join(args.packages)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

"""``detect-bench``: one entry point, one subcommand per benchmark.

    detect-bench http --url http://127.0.0.1:8000 --concurrency 16 --duration 20 --images DIR

To add a subcommand, write a module with ``add_arguments(parser)`` and ``run(args) -> int`` and add one
line to `SUBCOMMANDS`; modules are imported only when the parser is built.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Protocol, cast

# name -> (module implementing it, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "http": ("exporters.bench.http_load", "load-test a running detect-serve over HTTP"),
    "backend": (
        "exporters.bench.backend",
        "latency/throughput of an artifact per batch size (ORT, TensorRT, eager)",
    ),
}


class SubcommandModule(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detect-bench", description="Benchmarks for exported detectors.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = cast(SubcommandModule, importlib.import_module(module_name))
        except ImportError as exc:
            # One subcommand's missing dependency must not take the others down.
            sub = subparsers.add_parser(name, help=f"{help_text} (unavailable: {exc})")
            sub.set_defaults(run=lambda args, exc=exc, name=name: _unavailable(name, exc))
            continue
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def _unavailable(name: str, exc: ImportError) -> int:
    print(f"detect-bench {name}: unavailable here: {exc} (install the dev extra: pip install 'detect[dev]')")
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())

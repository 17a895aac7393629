"""``detect-bench``: one entry point, one subcommand per benchmark.

    detect-bench http --url http://127.0.0.1:8000 --concurrency 16 --duration 20 --images DIR

To add a subcommand, write a module with ``add_arguments(parser)`` and ``run(args) -> int`` and add one
line to `SUBCOMMANDS`. Modules import their heavy dependencies (httpx, onnxruntime, onnx, torch) inside
the functions that run, so ``--help`` is fast and works on any install; a run that misses one says
which extra provides it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Protocol, cast

# name -> (module implementing it, one-line help, the install that provides what it needs)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "http": (
        "bench.load.http_command",
        "load-test a running detect-serve over HTTP",
        "the bench extra: make setup-serve, or pip install -e '.[serve,bench]'",
    ),
    "streams": (
        "bench.streams.load",
        "N synthetic cameras against detect-serve: processed fps, drops, lag, CPU",
        "the bench extra: make setup-serve, or pip install -e '.[serve,bench]'",
    ),
    "backend": (
        "bench.backend.command",
        "latency/throughput of an artifact per batch size (ORT, TensorRT, eager)",
        "the export extra (and train for --eager-checkpoint): make setup",
    ),
}


class SubcommandModule(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that subcommand's module is imported (the others are listed)."""
    parser = argparse.ArgumentParser(prog="detect-bench", description="Benchmarks for exported detectors.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text, _) in SUBCOMMANDS.items():
        if only is not None and name != only:
            subparsers.add_parser(name, help=help_text)
            continue
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
    print(f"detect-bench {name}: error: {exc}; install {SUBCOMMANDS[name][2]}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Import only the subcommand asked for: `detect-bench --help` imports none of them.
    words = [a for a in argv if not a.startswith("-")]
    args = build_parser(words[0] if words else "").parse_args(argv)
    try:
        return int(args.run(args))
    except ModuleNotFoundError as exc:
        return _unavailable(args.command, exc)


if __name__ == "__main__":
    sys.exit(main())

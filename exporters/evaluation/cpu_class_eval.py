"""An artifact's served AP under every x86 CPU class this machine can reach, each in a fresh process.

OpenVINO builds a different graph per instruction set, so an INT8 artifact's accuracy is a property of
the CPU class as much as of the file (docs/quantization.md, "The same answers on every CPU"). oneDNN
reads ``ONEDNN_MAX_CPU_ISA`` once, when it loads, so each class runs in a child process started with the
cap (`contract.cpu_classes`): ``python -m exporters.evaluation.cpu_class_eval`` evaluates with
`exporters.evaluation.served_eval.served_metrics` and prints one JSON line. The class the calling process
already runs as is measured in-process by the caller.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.cpu_classes import (
    CLASS_NAMES,
    ISA_ENV,
    UnknownIsaError,
    class_cap,
    cpu_flags,
    effective_class,
    reachable_classes,
)
from exporters.errors import ExportError

_RESULT_PREFIX = "CPU-CLASS-RESULT "


@dataclass(frozen=True)
class ClassAP:
    """What one class measured: the AP the gate compares and the runtime that ran."""

    cpu_class: str
    cap: str
    box_ap: float
    mask_ap: float | None
    runtime: str


def classes_to_measure(wanted: list[str] | None) -> list[str]:
    """The classes to evaluate: ``wanted`` (checked: known, and reachable here) or every reachable one."""
    flags = cpu_flags()
    own = effective_class(flags)
    reachable = reachable_classes(flags)
    if own is not None:  # a process started under a cap reaches only what is at or below it
        reachable = reachable[: reachable.index(own) + 1]
    if wanted is None:
        return reachable
    unknown = [name for name in wanted if name not in CLASS_NAMES]
    if unknown:
        raise ExportError(f"unknown CPU class {unknown}; the classes are {list(CLASS_NAMES)}")
    beyond = [name for name in wanted if name not in reachable]
    if beyond:
        raise ExportError(
            f"CPU classes {beyond} are above this machine's ({own}); it can reach {reachable} "
            f"({ISA_ENV} only lowers the instruction set)"
        )
    return list(wanted)


def own_class() -> str | None:
    """The class this process runs as (native, or lowered by ``ONEDNN_MAX_CPU_ISA``)."""
    try:
        return effective_class(cpu_flags())
    except UnknownIsaError as exc:
        raise ExportError(str(exc)) from exc


def measure_in_child(
    artifact: Path, data: str, split: str | None, backend: str, max_images: int | None, cpu_class: str
) -> ClassAP:
    """Evaluate ``artifact`` in a fresh process capped at ``cpu_class``."""
    cap = class_cap(cpu_class)
    command = [sys.executable, "-m", "exporters.evaluation.cpu_class_eval", "--artifact", str(artifact)]
    command += ["--data", data, "--backend", backend, "--cpu-class", cpu_class]
    if split:
        command += ["--split", split]
    if max_images is not None:
        command += ["--max-images", str(max_images)]
    result = subprocess.run(
        command, env={**os.environ, ISA_ENV: cap}, capture_output=True, text=True, check=False
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(_RESULT_PREFIX)]
    if result.returncode != 0 or not lines:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-8:])
        raise ExportError(f"evaluating {artifact} as CPU class {cpu_class} ({ISA_ENV}={cap}) failed:\n{tail}")
    return ClassAP(**json.loads(lines[-1][len(_RESULT_PREFIX) :]))


def class_ap(cpu_class: str, metrics: dict[str, Any]) -> ClassAP:
    """A `ClassAP` from `served_metrics`' result, measured as ``cpu_class``."""
    segm = metrics.get("segm")
    return ClassAP(
        cpu_class=cpu_class,
        cap=class_cap(cpu_class),
        box_ap=float(metrics["bbox"]["AP"]),
        mask_ap=None if segm is None else float(segm["AP"]),
        runtime=str(metrics["runtime"]),
    )


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="served AP in this process's CPU class (one JSON line)")
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--max-images", type=int)
    parser.add_argument("--cpu-class", required=True, choices=CLASS_NAMES)
    args = parser.parse_args(argv)
    running = own_class()
    if running != args.cpu_class:  # the cap did not give the class asked for: measure nothing under its name
        print(f"this process runs as CPU class {running}, not {args.cpu_class}", file=sys.stderr)
        return 1
    from exporters.evaluation.served_eval import served_metrics

    metrics = served_metrics(
        args.artifact, args.data, args.split, backend=args.backend, max_images=args.max_images
    )
    print(_RESULT_PREFIX + json.dumps(class_ap(args.cpu_class, metrics).__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())

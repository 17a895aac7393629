"""Which shipped model should answer a request that names none: the written rule, applied to a measurement.

The rule (docs/cpu-inference.md, "The default model"):

1. Each artifact counts as it is served by ``DETECT_BACKEND=auto`` on the CPU (INT8 and bf16 in
   OpenVINO, fp32 in ONNX Runtime): its box AP and its single-image throughput on that runtime.
2. Only artifacts that answer one image in at most 40 ms (>= 25 img/s at batch 1) qualify: the default
   serves the web page and a first curl, one image at a time.
3. Among those, the highest box AP wins; AP within 0.005 of the best (the quantization gate: a
   difference the project does not treat as real) goes to the faster one.

Input: the JSON of ``detect-bench backend --models models --data DATA --batch-sizes 1 --json R.json``,
which measures every artifact on every CPU runtime in one interleaved run. Prints each candidate and the
choice; ``--write models/default`` records it.

    .venv/bin/python scripts/models/choose_default_model.py R.json [--write models/default]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.manifest import Manifest
from service.runtime.backends.select import cpu_runtime_for

MIN_IMAGES_PER_S = 25.0
AP_TIE = 0.005


@dataclass(frozen=True)
class Candidate:
    name: str  # the model's name in the repository
    runtime: str  # the variant label it is served as
    box_ap: float
    images_per_s: float  # batch 1


def choose_default(
    candidates: list[Candidate], min_images_per_s: float = MIN_IMAGES_PER_S, ap_tie: float = AP_TIE
) -> Candidate:
    """The rule of the module docstring; ValueError when no candidate is fast enough."""
    fast = [c for c in candidates if c.images_per_s >= min_images_per_s]
    if not fast:
        raise ValueError(f"no artifact reaches {min_images_per_s:g} img/s at batch 1")
    best_ap = max(c.box_ap for c in fast)
    return max((c for c in fast if c.box_ap >= best_ap - ap_tie), key=lambda c: c.images_per_s)


def served_candidates(report: dict[str, Any]) -> list[Candidate]:
    """One candidate per artifact of a ``detect-bench backend --models`` report: the variant that
    ``DETECT_BACKEND=auto`` serves it as (it needs AP, so the report must have been run with --data)."""
    by_artifact: dict[str, list[dict[str, Any]]] = {}
    for variant in report["variants"]:
        by_artifact.setdefault(variant["artifact"], []).append(variant)
    candidates = []
    for artifact, variants in by_artifact.items():
        manifest = Manifest.read(Path(artifact))
        kind = cpu_runtime_for(manifest.precision, openvino=True)
        served = [v for v in variants if v["backend"] == kind]
        served.sort(key=lambda v: v["openvino_precision"] != "manifest")  # the manifest's own precision first
        if not served or served[0]["ap"] is None:
            raise ValueError(f"the report has no AP for {artifact} as served ({kind}); run it with --data")
        throughput = served[0]["images_per_s"]
        ips = throughput.get("1", throughput.get(1))  # JSON keys are strings
        candidates.append(Candidate(manifest.name, served[0]["label"].split(" (")[0], served[0]["ap"], ips))
    return candidates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "report", type=Path, help="detect-bench backend --models ... --data ... --json output"
    )
    parser.add_argument("--write", type=Path, help="write the chosen name here (e.g. models/default)")
    parser.add_argument("--min-images-per-s", type=float, default=MIN_IMAGES_PER_S)
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text())
    if 1 not in report["batch_sizes"]:
        parser.error("the report must include batch size 1 (--batch-sizes 1,...)")
    try:
        candidates = served_candidates(report)
        choice = choose_default(candidates, args.min_images_per_s)
    except ValueError as exc:
        print(f"choose_default_model: error: {exc}", file=sys.stderr)
        return 2
    width = max(20, *(len(c.name) for c in candidates))
    for c in sorted(candidates, key=lambda c: (-c.box_ap, -c.images_per_s)):
        mark = "" if c.images_per_s >= args.min_images_per_s else "   (too slow for the default)"
        speed = f"{c.images_per_s:7.1f} img/s at bs 1"
        print(f"{c.name:<{width}} {c.runtime:<18} box AP {c.box_ap:.4f}  {speed}{mark}")
    print(f"default model: {choice.name}")
    if args.write:
        args.write.write_text(choice.name + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Which part of a network INT8 hurts: quantize an fp32 artifact once per candidate scope kept in fp32 and
print each variant's box AP as served, next to the parent's.

    .venv/bin/python scripts/export/int8_scope_ablation.py --artifact PARENT --data DATA \\
        [--calibration-images 150] [--drop-pattern REGEX ...] \\
        [--scope NAME=REGEX[,REGEX...] ...] [--json OUT.json] [--keep DIR]

Every variant keeps what ``detect-export quantize`` keeps fp32 (pre- and post-processing, the sensitive op
types, the architecture's ``int8_ignored_patterns`` less any ``--drop-pattern``) and adds its scope's
patterns (NNCF ``IgnoredScope`` patterns: ``re.search`` over ONNX node names). ``none`` (always run) adds
nothing. Calibration: ``--calibration-images`` of the train split drawn by seed 0, decoded and resized as
served; AP: the val split through ``DETECT_BACKEND=auto`` (OpenVINO for INT8, ONNX Runtime for fp32).
``--keep DIR`` writes each variant to ``DIR/<parent>-int8-<scope>/1`` (gate-less, for ``detect-bench
backend --models`` to time them); without it they live in a temporary folder.

EfficientDet-D0, whose class net this chose to keep fp32 (docs/quantization.md)::

    --drop-pattern '^.*/class_net/' --scope class_net='^.*/class_net/' --scope box_net='^.*/box_net/' \\
        --scope bifpn='^.*/fpn/' --scope backbone='^.*/backbone/' --scope predict='^.*/predict/'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

from exporters.artifact import read_artifact
from exporters.evaluation.served_eval import served_batches, served_metrics
from exporters.onnx.graph import ensure_node_names, load_checked, restore_weights_fp32
from exporters.precision.nncf_int8 import calibration_files, ignored_scope, quantize_batches


def _scopes(items: list[str]) -> dict[str, list[str]]:
    scopes: dict[str, list[str]] = {"none": []}
    for item in items:
        name, sep, patterns = item.partition("=")
        if not sep or not name or not patterns:
            raise SystemExit(f"--scope {item!r}: expected NAME=REGEX[,REGEX...]")
        scopes[name] = patterns.split(",")
    return scopes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifact", required=True, type=Path, help="the fp32 ONNX parent artifact")
    parser.add_argument("--data", required=True, help="COCO-format folder with train and val splits")
    parser.add_argument("--calibration-images", type=int, default=150)
    parser.add_argument("--drop-pattern", action="append", default=[], help="an architecture pattern to drop")
    parser.add_argument("--scope", action="append", default=[], help="NAME=REGEX[,REGEX...] kept fp32")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", type=Path, help="write the variants here instead of a temporary folder")
    args = parser.parse_args()

    parent, parent_path = read_artifact(args.artifact)
    model = restore_weights_fp32(load_checked(parent_path))
    ensure_node_names(model)
    base = ignored_scope(model, parent)
    unknown = set(args.drop_pattern) - set(base["patterns"])
    if unknown:
        raise SystemExit(f"--drop-pattern {sorted(unknown)}: not among {base['patterns']}")
    base["patterns"] = [p for p in base["patterns"] if p not in args.drop_pattern]
    images_dir, files = calibration_files(args.data, "train", args.calibration_images, 0)
    batches = [images for images, _, _ in served_batches(parent, images_dir, files, 1)]
    parent_ap = float(served_metrics(args.artifact, args.data)["bbox"]["AP"])
    print(f"parent {parent.name}/{parent.version}: box AP {parent_ap:.4f}", flush=True)
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="int8-ablation-"))
        for name, patterns in _scopes(args.scope).items():
            start = time.perf_counter()
            scope = {**base, "patterns": base["patterns"] + patterns}
            fresh = onnx.ModelProto.FromString(model.SerializeToString())
            quantized = quantize_batches(fresh, parent, batches, scope)
            variant_name = f"{parent.name}-int8-{name}"
            variant = Path(tmp) / variant_name / "1"
            variant.mkdir(parents=True)
            onnx.save(quantized, str(variant / parent.file))
            parent.model_copy(update={"precision": "int8", "name": variant_name}).write(variant)
            metrics = served_metrics(variant, args.data)
            ap = float(metrics["bbox"]["AP"])
            results.append({"scope": name, "patterns": patterns, "box_ap": ap, "delta": ap - parent_ap})
            took = time.perf_counter() - start
            print(f"{name:>12}: box AP {ap:.4f} ({ap - parent_ap:+.4f}) {metrics['runtime']}, {took:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"parent_box_ap": parent_ap, "variants": results}, indent=2))


if __name__ == "__main__":
    main()

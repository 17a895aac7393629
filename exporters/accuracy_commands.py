"""``detect-export quantize``, ``eval`` and ``golden``: reduced-precision variants behind the accuracy gate,
an artifact's served AP (per CPU class for OpenVINO) and the golden inputs of its self-check at load."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from exporters.cli_args import request_from_args


def _cpu_classes(value: str) -> list[str]:
    from contract.cpu_classes import CLASS_NAMES

    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in CLASS_NAMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown CPU class {unknown or value!r}; use {list(CLASS_NAMES)}")
    return names


_CPU_CLASSES_HELP = (
    "comma-separated CPU classes an OpenVINO artifact is measured under, each in a fresh process capped by "
    "ONEDNN_MAX_CPU_ISA (default: every class this machine reaches of avx2, avx512_core, avx512_vnni, "
    "avx512_bf16, amx)"
)


def add_quantize_parser(sub: Any) -> None:
    q = sub.add_parser(
        "quantize",
        help="INT8 (NNCF) or bf16 variant of an fp32 ONNX artifact, refused if its AP drops past the gate",
    )
    q.add_argument("--artifact", required=True, type=Path, help="the fp32 ONNX parent artifact")
    q.add_argument("--output", required=True, type=Path, help="variant folder, e.g. models/NAME-int8/1")
    q.add_argument("--data", required=True, help="COCO-format folder: calibration and validation images")
    q.add_argument("--precision", choices=("int8", "bf16"), default="int8")
    q.add_argument(
        "--unquantized-precision",
        choices=("f32", "bf16"),
        help="int8: the precision OpenVINO runs the layers left unquantized in (default f32), as the gate "
        "measures it",
    )
    q.add_argument("--calibration-split", default="train", help="split the calibration images come from")
    q.add_argument("--calibration-images", type=int, default=300, help="how many (drawn by --seed)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--split", help="validation split of the gate (default: val2017 if present, else val)")
    q.add_argument("--max-images", type=int, help="gate on only the first N validation images (by id)")
    q.add_argument("--max-ap-drop", type=float, default=0.005, help="largest AP loss accepted (box and mask)")
    q.add_argument("--no-accuracy-gate", action="store_true", help="write the variant whatever its AP")
    q.add_argument(
        "--accuracy-control",
        action="store_true",
        help="NNCF accuracy-controlled quantization: keep the most harmful layers fp32 until the drop fits",
    )
    q.add_argument(
        "--ranking-images",
        type=int,
        default=50,
        help="--accuracy-control: the validation images the quantizer groups are ranked on (those whose AP "
        "INT8 changed most)",
    )
    q.add_argument("--backend", default="auto", help="DETECT_BACKEND the INT8 gate runs the variant on")
    q.add_argument("--dataset-description", help="how the data was made, recorded in the manifest")
    q.add_argument("--cpu-classes", type=_cpu_classes, help=_CPU_CLASSES_HELP)
    q.add_argument(
        "--overflow-fix",
        choices=("enable", "first_layer_only", "disable"),
        default="enable",
        help="int8: NNCF's overflow fix, weights in 7 bits (enable: every layer, the default, so AVX2's "
        "saturating int16 sums do not clip)",
    )
    q.add_argument("--name")
    q.add_argument("--version")
    q.add_argument("--force", action="store_true", help="replace an existing output folder")


def run_quantize(args: argparse.Namespace) -> int:
    from exporters.precision.quantize import QuantizeRequest, quantize_artifact

    request = request_from_args(
        QuantizeRequest,
        args,
        val_split=args.split,
        max_eval_images=args.max_images,
        gate=not args.no_accuracy_gate,
    )
    manifest = quantize_artifact(request)
    acc = manifest.accuracy
    assert acc is not None
    mask = "" if acc.mask_ap is None else f"; mask AP {acc.mask_ap:.4f} ({acc.mask_ap_delta:+.4f})"
    precision: str = manifest.precision
    if manifest.unquantized_precision is not None:
        precision += f", unquantized layers {manifest.unquantized_precision}"
    print(
        f"wrote {args.output} ({manifest.name}/{manifest.version}, {precision}): box AP "
        f"{acc.box_ap:.4f} vs parent {acc.parent_box_ap:.4f} ({acc.box_ap_delta:+.4f}){mask} on "
        f"{acc.images} images, {acc.runtime}"
    )
    for name, figure in acc.by_isa.items():
        mask = (
            ""
            if figure.mask_ap_delta is None
            else f"; mask AP {figure.mask_ap:.4f} ({figure.mask_ap_delta:+.4f})"
        )
        print(f"  as {name} ({figure.cap}): box AP {figure.box_ap:.4f} ({figure.box_ap_delta:+.4f}){mask}")
    return 0


def add_eval_parser(sub: Any) -> None:
    ev = sub.add_parser("eval", help="COCO AP of an artifact as served (service decoding, resize, backend)")
    ev.add_argument("--artifact", required=True, type=Path)
    ev.add_argument("--data", required=True, help="COCO-format folder")
    ev.add_argument("--split", help="dataset split (default: val2017 if present, else val)")
    ev.add_argument("--max-images", type=int, help="evaluate only the first N images (by id)")
    ev.add_argument("--backend", default="auto", help="DETECT_BACKEND to run it on")
    ev.add_argument("--dataset-description", help="how the data was made, recorded in the manifest")
    ev.add_argument("--cpu-classes", type=_cpu_classes, help=_CPU_CLASSES_HELP)
    ev.add_argument(
        "--write",
        action="store_true",
        help="record the result as the manifest's accuracy, and its quality baseline",
    )


def run_eval(args: argparse.Namespace) -> int:
    from exporters.precision.quantize import record_accuracy

    accuracy = record_accuracy(
        args.artifact,
        args.data,
        args.split,
        args.backend,
        args.max_images,
        args.dataset_description,
        write=args.write,
        cpu_classes=args.cpu_classes,
    )
    mask = "" if accuracy.mask_ap is None else f", mask AP {accuracy.mask_ap:.4f}"
    print(f"box AP {accuracy.box_ap:.4f}{mask} on {accuracy.images} images ({accuracy.runtime})")
    for name, figure in accuracy.by_isa.items():
        mask = "" if figure.mask_ap is None else f", mask AP {figure.mask_ap:.4f}"
        print(f"  as {name} ({figure.cap}): box AP {figure.box_ap:.4f}{mask} ({figure.runtime})")
    return 0


def add_golden_parser(sub: Any) -> None:
    golden = sub.add_parser(
        "golden", help="golden inputs for the service's self-check at load (golden.npz + manifest self_check)"
    )
    golden.add_argument("--artifact", required=True, type=Path)
    golden.add_argument("--data", required=True, help="COCO-format folder the images come from")
    golden.add_argument("--split", help="dataset split (default: val2017 if present, else val)")
    golden.add_argument("--images", type=int, default=3, help="how many (the busiest of the first ids)")
    golden.add_argument("--backend", default="auto", help="DETECT_BACKEND the expected detections come from")


def run_golden(args: argparse.Namespace) -> int:
    from exporters.evaluation.golden import write_artifact_golden

    manifest = write_artifact_golden(
        args.artifact, args.data, args.split, backend=args.backend, count=args.images
    )
    manifest.write(args.artifact)
    spec = manifest.self_check
    assert spec is not None
    print(
        f"wrote {args.artifact / spec.file}: {spec.images} images, expected detections from {spec.reference}"
    )
    return 0

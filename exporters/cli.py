"""``detect-export``: checkpoint -> ONNX artifact -> FP16 / TensorRT, with verification at every step.

    detect-export onnx --checkpoint runs/ssd/checkpoint.pt --output models/ssd300/1
    detect-export verify --artifact models/ssd300/1 --checkpoint runs/ssd/checkpoint.pt [--data DIR]
    detect-export fp16-eval --artifact models/ssd300/1 [--data DIR]
    detect-export display-threshold --artifact models/ssd300/1 --data DIR
    detect-export trt --artifact models/ssd300/1 --output models/ssd300-trt/1 [--timing-cache FILE]
    detect-export quantize --artifact models/ssd300/1 --output models/ssd300-int8/1 --data DIR
    detect-export eval --artifact models/ssd300-int8/1 --data DIR [--write] [--cpu-classes avx2,amx]
    detect-export golden --artifact models/ssd300-int8/1 --data DIR
    detect-export import --source model.tflite --spec import.json --output models/<name>/1 --samples IMGS

Exit codes: 0 success; 2 bad input (missing or unreadable file, unknown architecture, existing output,
invalid ONNX or manifest, bad option); 3 verification out of tolerance; 4 a GPU is required (``trt``
after writing everything that needs none). Failed commands leave no partial artifact behind.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from exporters import accuracy_commands
from exporters.cli_args import request_from_args as _request
from exporters.errors import ExportError, GpuRequiredError, VerificationError
from exporters.importing.arguments import add_import_parser

EXIT_BAD_INPUT = 2
EXIT_VERIFICATION = 3
EXIT_GPU_REQUIRED = 4

T = TypeVar("T")


def _add_data_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--data", help=f"COCO-format dataset root: also compare COCO AP of {what}")
    parser.add_argument("--split", help="dataset split (default: val2017 if present, else val)")
    parser.add_argument("--max-images", type=int, help="evaluate only the first N images (by id)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detect-export", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser, _ in COMMANDS.values():
        add_parser(sub)
    return parser


# What skips each command's gate, named in its failure message.
_SKIP_HINTS = {
    "verify": "detect-export onnx --no-verify exports without this check",
    "fp16-eval": "detect-export trt --no-verify builds without this check",
}


def _print_report(report: dict[str, Any], json_path: Path | None, command: str) -> None:
    print(f"{'PASSED' if report['passed'] else 'FAILED'}: {report.get('summary', '')}".rstrip(": "))
    if not report["passed"]:
        print(f"({_SKIP_HINTS[command]})")
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n")


# ---------------------------------------------------------------------------------- one pair per command
def _add_onnx_parser(sub: Any) -> None:
    onnx = sub.add_parser("onnx", help="export a checkpoint to an ONNX artifact (model.onnx + manifest.json)")
    onnx.add_argument("--checkpoint", required=True, type=Path)
    onnx.add_argument(
        "--output", required=True, type=Path, help="artifact folder, e.g. models/<name>/<version>"
    )
    onnx.add_argument("--name", help="model name (default: the output's parent folder name)")
    onnx.add_argument("--version", help="model version (default: the output folder name)")
    onnx.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    onnx.add_argument("--max-detections", type=int, help="K detections per image (default 100)")
    onnx.add_argument(
        "--score-threshold", type=float, help="default: the architecture's (SSD300: 0.05, SSD320: 1e-8)"
    )
    onnx.add_argument(
        "--iou-threshold", type=float, help="NMS IoU (default: the architecture's; SSD300 0.5, SSD320 0.6)"
    )
    onnx.add_argument(
        "--topk-per-class",
        type=int,
        help="candidates per class before NMS (default: the architecture's; SSD300 200, SSD320 100)",
    )
    onnx.add_argument(
        "--pre-nms-topk",
        type=int,
        help="candidates over all classes before NMS, < 3840 (EfficientDet; default 3000)",
    )
    onnx.add_argument("--max-batch", type=int, default=32, help="largest batch the service may send")
    onnx.add_argument(
        "--weight-storage",
        choices=["float32", "float16"],
        default="float32",
        help="float16 halves the file: weights rounded to fp16, cast back in-graph, compute stays fp32",
    )
    onnx.add_argument("--no-verify", action="store_true", help="skip the comparison with eager PyTorch")
    onnx.add_argument("--force", action="store_true", help="replace an existing output folder")


def _run_onnx(args: argparse.Namespace) -> int:
    from exporters.checkpoint_export import OnnxExportRequest, export_onnx

    request = _request(OnnxExportRequest, args, max_batch_size=args.max_batch, verify=not args.no_verify)
    manifest = export_onnx(request)
    print(
        f"wrote {args.output}/{manifest.file} and manifest.json ({manifest.name}/{manifest.version}, "
        f"{manifest.architecture}, {len(manifest.labels)} labels, K={manifest.max_detections})"
    )
    print(f"verification: {manifest.verification.get('summary', manifest.verification)}")
    return 0


def _add_verify_parser(sub: Any) -> None:
    verify = sub.add_parser(
        "verify", help="compare an ONNX artifact with eager PyTorch; results into manifest"
    )
    verify.add_argument("--artifact", required=True, type=Path)
    verify.add_argument("--checkpoint", required=True, type=Path)
    _add_data_arguments(verify, "eager PyTorch and the artifact")
    verify.add_argument("--batch-size", type=int, default=8)
    verify.add_argument("--no-write", action="store_true", help="do not record the results in the manifest")
    verify.add_argument("--json", type=Path, help="also write the full report here")


def _run_verify(args: argparse.Namespace) -> int:
    from exporters.evaluation.verify import verify_artifact

    report = verify_artifact(
        args.artifact,
        args.checkpoint,
        data=args.data,
        split=args.split,
        batch_size=args.batch_size,
        max_images=args.max_images,
        write=not args.no_write,
    ).to_dict()
    _print_report(report, args.json, args.command)
    return 0 if report["passed"] else EXIT_VERIFICATION


def _add_display_threshold_parser(sub: Any) -> None:
    display = sub.add_parser(
        "display-threshold",
        help="F1-optimal score threshold for drawing boxes, from the artifact alone; into the manifest",
    )
    display.add_argument("--artifact", required=True, type=Path, help="an ONNX artifact (fp32 or fp16)")
    display.add_argument("--data", required=True, help="COCO-format dataset root (its validation split)")
    display.add_argument("--split", help="dataset split (default: val2017 if present, else val)")
    display.add_argument("--max-images", type=int, help="use only the first N images (by id)")
    display.add_argument("--batch-size", type=int, default=8)
    display.add_argument("--no-write", action="store_true", help="only print it")


def _run_display_threshold(args: argparse.Namespace) -> int:
    from exporters.evaluation.verify import artifact_display_threshold

    display = artifact_display_threshold(
        args.artifact, args.data, args.split, args.batch_size, args.max_images, write=not args.no_write
    )
    print(
        f"display_score_threshold {display['threshold']:.4f}: F1 {display['f1']:.3f} (precision "
        f"{display['precision']:.3f}, recall {display['recall']:.3f}; {display['detections_kept']} of "
        f"{display['detections']} detections kept, {display['ground_truth']} objects, IoU 0.5, classes "
        f"pooled) on {display['dataset']}" + ("" if args.no_write else f"; written to {args.artifact}")
    )
    return 0


def _add_fp16_eval_parser(sub: Any) -> None:
    fp16 = sub.add_parser("fp16-eval", help="accuracy of the FP16 graph against FP32 (ONNX Runtime, CPU)")
    fp16.add_argument("--artifact", required=True, type=Path, help="the FP32 ONNX artifact")
    fp16.add_argument("--fp16", type=Path, help="FP16 ONNX to evaluate (default: convert the artifact)")
    _add_data_arguments(fp16, "FP32 and FP16")
    fp16.add_argument("--no-write", action="store_true", help="do not record the results in the manifest")
    fp16.add_argument("--json", type=Path, help="also write the full report here")


def _run_fp16_eval(args: argparse.Namespace) -> int:
    from exporters.precision.fp16 import fp16_eval

    report = fp16_eval(
        args.artifact, args.fp16, args.data, args.split, args.max_images, write=not args.no_write
    ).to_dict()
    report["summary"] = "; ".join(
        [f"{n} rel err {r['max_rel_error']:.2e}" for n, r in report["raw_outputs"].items()]
        + (
            [
                f"AP fp32 {report['coco']['fp32_ap']:.4f} fp16 {report['coco']['fp16_ap']:.4f} "
                f"(delta {report['coco']['ap_delta']:+.4f})"
            ]
            if "coco" in report
            else []
        )
    )
    _print_report(report, args.json, args.command)
    return 0 if report["passed"] else EXIT_VERIFICATION


def _add_trt_parser(sub: Any) -> None:
    trt = sub.add_parser("trt", help="FP16 ONNX + strongly typed TensorRT engine (model.plan)")
    trt.add_argument("--artifact", required=True, type=Path, help="the FP32 ONNX artifact")
    trt.add_argument("--output", required=True, type=Path, help="engine artifact folder")
    trt.add_argument("--name")
    trt.add_argument("--version")
    trt.add_argument("--min-batch", type=int, default=1)
    trt.add_argument("--opt-batch", type=int, default=8)
    trt.add_argument("--max-batch", type=int, default=32)
    trt.add_argument("--workspace-gb", type=float, help="builder workspace limit (default: TensorRT's)")
    trt.add_argument("--timing-cache", type=Path, help="timing cache file, read if present and updated")
    _add_data_arguments(trt, "FP32 and FP16 before building")
    trt.add_argument(
        "--no-verify",
        action="store_true",
        help="build even when FP16 is out of tolerance against FP32 (the accuracy is still recorded)",
    )
    trt.add_argument("--force", action="store_true", help="replace an existing output folder")


def _run_trt(args: argparse.Namespace) -> int:
    from exporters.tensorrt.build import export_tensorrt
    from exporters.tensorrt.config import TensorRTExportRequest

    manifest = export_tensorrt(_request(TensorRTExportRequest, args, verify=not args.no_verify))
    print(f"wrote {args.output}/{manifest.file} and manifest.json (format {manifest.format}, fp16)")
    return 0


# name -> (adds its subparser, runs it); the order is --help's.
def _run_import(args: argparse.Namespace) -> int:
    from exporters.importing.command import run_import  # torch, onnx: after argument parsing

    return run_import(args)


COMMANDS: dict[str, tuple[Callable[[Any], None], Callable[[argparse.Namespace], int]]] = {
    "onnx": (_add_onnx_parser, _run_onnx),
    "verify": (_add_verify_parser, _run_verify),
    "display-threshold": (_add_display_threshold_parser, _run_display_threshold),
    "fp16-eval": (_add_fp16_eval_parser, _run_fp16_eval),
    "trt": (_add_trt_parser, _run_trt),
    "quantize": (accuracy_commands.add_quantize_parser, accuracy_commands.run_quantize),
    "eval": (accuracy_commands.add_eval_parser, accuracy_commands.run_eval),
    "golden": (accuracy_commands.add_golden_parser, accuracy_commands.run_golden),
    "import": (add_import_parser, _run_import),
}


def _run(args: argparse.Namespace) -> int:
    return COMMANDS[args.command][1](args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prefix = f"detect-export {args.command}: error:"
    try:
        from training.checkpoint import CheckpointError  # imports torch: after argument parsing
    except ModuleNotFoundError as exc:
        needs = "detect-export needs the export and train extras (make setup)"
        print(f"{prefix} {exc}: {needs}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return _run(args)
    except GpuRequiredError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return EXIT_GPU_REQUIRED
    except VerificationError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return EXIT_VERIFICATION
    except (ExportError, CheckpointError, ValueError, FileNotFoundError) as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())

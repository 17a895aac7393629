"""``detect-export import``'s arguments (argparse only: ``--help`` loads neither torch nor onnx)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def add_import_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "import", help="a detector trained elsewhere (TFLite, ONNX) -> a verified artifact"
    )
    parser.add_argument("--source", required=True, type=Path, help="the model file: .tflite or .onnx")
    parser.add_argument("--spec", required=True, type=Path, help="import spec (JSON): input, head, labels")
    parser.add_argument("--output", required=True, type=Path, help="artifact folder models/<name>/<version>")
    parser.add_argument("--samples", required=True, type=Path, nargs="+", help="images to verify on (>= 1)")
    parser.add_argument("--notice", type=Path, nargs="*", default=[], help="files copied beside the model")
    parser.add_argument("--version", help="model version (default: the output folder name)")
    parser.add_argument("--raw-tolerance", type=float, default=1e-3, help="max abs difference of raw outputs")
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")

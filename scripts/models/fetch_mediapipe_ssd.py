"""MediaPipe's SSD MobileNetV2 (Open Images v4) from the npm registry, ready for ``detect-export import``.

Fetches ``@mediapipe/objectron`` by name and version, checks the tarball's sha256, unpacks the model and its
label map from the package's Emscripten data file, checks the model's sha256, and writes beside them the
import spec of ``recipes/mediapipe-ssd-oidv4``:

    .venv/bin/python scripts/models/fetch_mediapipe_ssd.py --out data/imports/mediapipe-ssd-oidv4
    # -> model.tflite, labelmap.txt, import.json (then: make real-photo-model)
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

from exporters.importing.npm_package import fetch_tarball, read_member, unpack_emscripten

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "mediapipe-ssd-oidv4"
PACKAGE = "@mediapipe/objectron"
VERSION = "0.4.1675468480"
TARBALL_SHA256 = "fc3e37b326b05e8f596099c90b3e0931b05a56cd3160b9ac450b621794bac94c"
DATA = "objectron_solution_packed_assets.data"
LOADER = "objectron_solution_packed_assets_loader.js"
# file in the package's virtual file system -> (name written, sha256)
FILES = {
    "/third_party/mediapipe/modules/objectron/object_detection_ssd_mobilenetv2_oidv4_fp16.tflite": (
        "model.tflite",
        "d0a5255bf8c4f5a0bc4240741a76c41d5e939f7655078f945f50ab53a9375da6",
    ),
    "/object_detection_oidv4_labelmap.txt": (
        "labelmap.txt",
        "c148336a65f673013609a923fdcbdeec0f49df935045029c3746a3828a0e80e0",
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "imports" / "mediapipe-ssd-oidv4")
    parser.add_argument("--cache", type=Path, default=ROOT / "data" / "downloads")
    args = parser.parse_args(argv)
    tarball = fetch_tarball(PACKAGE, VERSION, TARBALL_SHA256, args.cache)
    files = unpack_emscripten(read_member(tarball, DATA), read_member(tarball, LOADER).decode())
    args.out.mkdir(parents=True, exist_ok=True)
    for path, (name, sha256) in FILES.items():
        if path not in files:
            raise SystemExit(f"{PACKAGE}@{VERSION}: {DATA} has no {path}; it has {sorted(files)}")
        actual = hashlib.sha256(files[path]).hexdigest()
        if actual != sha256:
            raise SystemExit(f"{PACKAGE}@{VERSION}: {path}: sha256 {actual}, expected {sha256}")
        (args.out / name).write_bytes(files[path])
        print(f"{args.out / name} ({len(files[path])} bytes, sha256 {sha256[:12]}...)")
    shutil.copyfile(RECIPE / "import.json", args.out / "import.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

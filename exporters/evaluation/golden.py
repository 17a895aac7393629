"""``detect-export golden``: the golden inputs an artifact carries for the service's self-check at load.

A few images of a COCO split (those with the most objects among its first ids), decoded and resized as
the service does, run through the artifact as the service runs it on this machine; the network inputs
and the detections go into ``golden.npz`` (`contract.self_check`) and the manifest's ``self_check``
names the file, its sha256 and the tolerances `contract.self_check.compare` applies.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contract.manifest import Manifest
from contract.self_check import golden_spec, write_golden
from exporters.artifact import utc_now
from exporters.evaluation.cpu_class_eval import own_class
from exporters.evaluation.served_eval import served_batches
from service.served import load_backend

GOLDEN_IMAGES = 3
_CANDIDATES = 40  # the golden images are the busiest of the split's first ids


def golden_files(data: str, split: str | None, count: int) -> tuple[Path, list[tuple[int, str]]]:
    """``count`` images of the split: the ones with the most annotations among its first ids."""
    from training.data.coco import load_coco, resolve_split
    from training.train import default_split

    images_dir, annotation_file = resolve_split(data, split or default_split(data, "val"))
    coco = load_coco(annotation_file)
    ids = sorted(coco.getImgIds())[:_CANDIDATES]
    busiest = sorted(ids, key=lambda i: (-len(coco.getAnnIds(imgIds=[i])), i))[:count]
    return Path(images_dir), [(i, str(coco.imgs[i]["file_name"])) for i in sorted(busiest)]


def write_artifact_golden(
    version_dir: Path,
    data: str,
    split: str | None = None,
    *,
    backend: str = "auto",
    count: int = GOLDEN_IMAGES,
    manifest: Manifest | None = None,
) -> Manifest:
    """Write ``golden.npz`` into ``version_dir`` and return its manifest with ``self_check`` set (the
    manifest file itself is left to the caller)."""
    manifest = manifest or Manifest.read(version_dir)
    images_dir, files = golden_files(data, split, count)
    return golden_for_images(version_dir, manifest, images_dir, files, backend)


def golden_for_images(
    version_dir: Path,
    manifest: Manifest,
    images_dir: Path,
    files: list[tuple[int, str]],
    backend: str = "auto",
) -> Manifest:
    """``write_artifact_golden`` for given image files (``(id, file name in images_dir)``)."""
    images = np.concatenate([batch for batch, _, _ in served_batches(manifest, images_dir, files, 1)])
    runtime = load_backend(version_dir, backend, manifest=manifest)
    try:
        outputs = runtime.infer(images)
        description = runtime.description
    finally:
        runtime.close()
    file, sha256 = write_golden(version_dir, images, outputs)
    reference = f"{description} as CPU class {own_class()}"
    spec = golden_spec(file, sha256, len(images), manifest.default_threshold, reference, utc_now())
    return manifest.model_copy(update={"self_check": spec})

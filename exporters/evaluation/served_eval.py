"""COCO AP of an artifact as the service serves it: the service's decoding, resize and backend factory.

The images are the split's files decoded by `service.served.decode_image` (as an upload would be), resized
by `contract.geometry.resize_for_network` (the manifest's input spec) and run by the backend
`service.served.load_backend` loads for ``DETECT_BACKEND`` (default ``auto``); boxes go back to original
pixels with the same `BoxTransform` the service uses. So the figure gated and recorded is the figure
``/detect`` gives, not one of a look-alike path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from contract.geometry import BoxTransform, resize_for_network
from contract.manifest import Manifest
from exporters.evaluation.coco_ap import Batch, EvalImage, evaluate
from exporters.evaluation.compare import Detections
from exporters.evaluation.quality import ServedDetections
from service.served import decode_image, load_backend
from training.checkpoint import sha256_file as file_sha256


class Runner(Protocol):
    """What the evaluation needs of a runtime: `service.served.Backend`'s ``infer`` contract."""

    @property
    def description(self) -> str: ...

    def infer(self, images: np.ndarray) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


# No request limit applies to a local evaluation; this only bounds a single pathological file.
_MAX_PIXELS = 200_000_000


def served_batches(
    manifest: Manifest, images_dir: Path, files: list[tuple[int, str]], batch_size: int
) -> Iterator[tuple[np.ndarray, list[int], list[BoxTransform]]]:
    """``(uint8 [B, H, W, 3] network input, image ids, box transforms)``, decoded and resized as served."""
    for start in range(0, len(files), batch_size):
        chunk = files[start : start + batch_size]
        images, transforms = [], []
        for _, file_name in chunk:
            path = images_dir / file_name
            image = decode_image(path.read_bytes(), max_pixels=_MAX_PIXELS, field=str(path))
            resized, transform = resize_for_network(image, manifest.input)
            images.append(resized)
            transforms.append(transform)
        yield np.stack(images), [image_id for image_id, _ in chunk], transforms


def _evaluated(batches: Iterator[tuple[np.ndarray, list[int], list[BoxTransform]]]) -> Iterator[Batch]:
    """:func:`served_batches` as `exporters.evaluation.coco_ap.evaluate` takes them."""
    for images, image_ids, transforms in batches:
        yield (
            images,
            [
                EvalImage(i, (tf.original_height, tf.original_width), tf.boxes_to_original)
                for i, tf in zip(image_ids, transforms, strict=True)
            ],
        )


def served_display_threshold(evaluator: Any, data: str, split: str) -> dict[str, Any] | None:
    """The F1-optimal display threshold of an evaluated detector (`exporters.evaluation.display_threshold`),
    with where
    it was measured; None when the split gives nothing to choose from (no detection)."""
    from exporters.evaluation.display_threshold import f1_optimal_threshold

    try:
        chosen = f1_optimal_threshold(evaluator.coco_gt, evaluator.results)
    except ValueError:
        return None
    method = "F1-optimal, IoU 0.5, classes pooled"
    return {**chosen.to_dict(), "dataset": f"{data} ({split})", "method": method}


def split_image_ids(data: str, split: str | None = None, max_images: int | None = None) -> list[int]:
    """The ids :func:`served_metrics` evaluates by default: the split's first ``max_images`` by id."""
    from training.data.coco import load_coco, resolve_split
    from training.train import default_split

    _, annotation_file = resolve_split(data, split or default_split(data, "val"))
    return _first_ids(load_coco(annotation_file), max_images)


def _first_ids(coco_gt: Any, max_images: int | None) -> list[int]:
    return sorted(coco_gt.getImgIds())[:max_images]


def served_metrics(
    version_dir: str | Path,
    data: str,
    split: str | None = None,
    *,
    backend: str = "auto",
    max_images: int | None = None,
    image_ids: Sequence[int] | None = None,
    per_image: bool = False,
    batch_size: int = 8,
    threads: int = 0,
    manifest: Manifest | None = None,
    runtime: Runner | None = None,
) -> dict[str, Any]:
    """``{"bbox": 12 COCO metrics, "segm": ... (mask models), "images", "annotations_sha256", "runtime",
    "detections"}``; ``"detections"`` (`ServedDetections`) holds every image's served detections, from which
    the manifest's ``quality`` baseline is counted.

    The split's images in id order (the first ``max_images``), or exactly ``image_ids``; ``per_image`` adds
    ``"per_image_box_ap"``, each image's own box AP by image id. ``manifest`` overrides the folder's;
    ``runtime`` replaces the service's backend (e.g. one a test built itself); it is closed afterwards.
    """
    from training.data.coco import load_coco, resolve_split
    from training.train import default_split

    version_dir = Path(version_dir)
    manifest = manifest or Manifest.read(version_dir)
    split = split or default_split(data, "val")
    images_dir, annotation_file = resolve_split(data, split)
    coco_gt = load_coco(annotation_file)
    ids = sorted(image_ids) if image_ids is not None else _first_ids(coco_gt, max_images)
    files = [(i, str(coco_gt.imgs[i]["file_name"])) for i in ids]
    category_ids = [
        int(label.coco_id if label.coco_id is not None else i) for i, label in enumerate(manifest.labels)
    ]
    if runtime is None:
        runtime = load_backend(version_dir, backend, manifest=manifest, threads=threads)
    served: Runner = runtime
    batches = _evaluated(served_batches(manifest, Path(images_dir), files, batch_size))
    try:
        detector = {"served": lambda images: Detections.from_contract(served.infer(images))}
        evaluator = evaluate(detector, batches, coco_gt, category_ids)["served"]
        description = served.description
    finally:
        served.close()
    metrics: dict[str, Any] = dict(evaluator.stats)
    metrics["display_threshold"] = served_display_threshold(evaluator, data, split)
    if per_image:
        metrics["per_image_box_ap"] = evaluator.per_image_ap("bbox")
    sizes = {i: (int(coco_gt.imgs[i]["width"]), int(coco_gt.imgs[i]["height"])) for i in ids}
    labels = tuple(label.name for label in manifest.labels)
    metrics["detections"] = ServedDetections.from_results(
        evaluator.results, sizes, category_ids, labels, (data, split, description)
    )
    metrics |= {
        "images": len(ids),
        "split": split,
        "annotations_sha256": file_sha256(annotation_file),
        "runtime": description,
    }
    return metrics

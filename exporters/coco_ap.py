"""COCO AP of several detectors on the same images, through training's pycocotools evaluator.

Every detector sees the same uint8 batches (read and resized once, with the wrapper's resize, i.e.
training's), so differences in AP come from the detectors alone. A detector maps uint8
``[B, H, W, 3]`` to per-image :class:`~exporters.compare.Detections` (boxes normalized to the input;
mask models add low-resolution masks, scored as ``segm`` after pasting them into the original image).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from exporters.compare import Detections
from training.box_ops import xyxy_to_ltwh
from training.coco_eval import CocoEvaluator
from training.data.coco import load_coco, read_image_rgb, resolve_split

Detector = Callable[[np.ndarray], list[Detections]]
Resize = Callable[[np.ndarray], np.ndarray]
# Boxes normalized to the network input [N, 4] + the original (height, width) -> original pixels [N, 4].
ToOriginal = Callable[[np.ndarray, tuple[int, int]], np.ndarray]


def stretch_to_original(boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Inverse of a stretch resize: normalized coordinates times the original width and height."""
    height, width = size
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4) * np.array(
        [width, height, width, height], dtype=np.float32
    )


def stretch_resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize ignoring the aspect ratio with training's rule (area filter when shrinking, else linear);
    for a square input this is exactly ``training.detectors.ssd300.transforms.resize_image``."""
    import cv2

    if height == width:
        from training.detectors.ssd300.transforms import resize_image

        return np.asarray(resize_image(image, height), dtype=np.uint8)
    h, w = image.shape[:2]
    interp = cv2.INTER_AREA if (w > width or h > height) else cv2.INTER_LINEAR
    return np.asarray(cv2.resize(image, (width, height), interpolation=interp), dtype=np.uint8)


def iter_batches(
    root: str, split: str, resize: Resize, batch_size: int, max_images: int | None = None
) -> Iterator[tuple[np.ndarray, list[int], list[tuple[int, int]]]]:
    """``(uint8 [B, H, W, 3], image ids, original (height, width))`` over the split in image-id order."""
    images_dir, annotation_file = resolve_split(root, split)
    coco = load_coco(annotation_file)
    ids = sorted(coco.getImgIds())[:max_images]
    for start in range(0, len(ids), batch_size):
        batch_ids = ids[start : start + batch_size]
        images, sizes = [], []
        for image_id in batch_ids:
            image = read_image_rgb(images_dir / coco.imgs[image_id]["file_name"])
            sizes.append((int(image.shape[0]), int(image.shape[1])))
            images.append(resize(image))
        yield np.stack(images), batch_ids, sizes


def _results(
    dets: Detections,
    image_id: int,
    size: tuple[int, int],
    category_ids: list[int],
    to_original: ToOriginal = stretch_to_original,
) -> list[dict[str, Any]]:
    """COCO results of one image; masks (if any) pasted into the original image as torchvision does."""
    import torch  # the box conversion is training's (torch); imported here to keep module import light

    from training.masks import masks_to_rles

    pixels = torch.from_numpy(np.ascontiguousarray(to_original(dets.boxes, size), dtype=np.float32))
    boxes = xyxy_to_ltwh(pixels).tolist()
    results = [
        {
            "image_id": int(image_id),
            "category_id": category_ids[int(c)],
            "bbox": [round(v, 3) for v in box],
            "score": round(float(s), 5),
        }
        for box, s, c in zip(boxes, dets.scores.tolist(), dets.classes.tolist(), strict=True)
    ]
    if dets.masks is not None and len(results):
        rles = masks_to_rles(torch.from_numpy(np.asarray(dets.masks, dtype=np.float32)), pixels, *size)
        for result, rle in zip(results, rles, strict=True):
            result["segmentation"] = rle
    return results


def coco_ap(
    detectors: dict[str, Detector],
    *,
    root: str,
    split: str,
    categories: list[dict[str, Any]],
    resize: Resize,
    batch_size: int = 8,
    max_images: int | None = None,
    to_original: ToOriginal = stretch_to_original,
) -> dict[str, dict[str, float]]:
    """The 12 COCO bbox metrics per detector name (see :func:`coco_metrics`)."""
    metrics = coco_metrics(
        detectors,
        root=root,
        split=split,
        categories=categories,
        resize=resize,
        batch_size=batch_size,
        max_images=max_images,
        to_original=to_original,
    )
    return {name: stats["bbox"] for name, stats in metrics.items()}


def coco_metrics(
    detectors: dict[str, Detector],
    *,
    root: str,
    split: str,
    categories: list[dict[str, Any]],
    resize: Resize,
    batch_size: int = 8,
    max_images: int | None = None,
    to_original: ToOriginal = stretch_to_original,
) -> dict[str, dict[str, dict[str, float]]]:
    """``{detector: {"bbox": 12 metrics, "segm": 12 metrics (mask models)}}``; see :func:`coco_evaluators`."""
    evaluators = coco_evaluators(
        detectors,
        root=root,
        split=split,
        categories=categories,
        resize=resize,
        batch_size=batch_size,
        max_images=max_images,
        to_original=to_original,
    )
    return {name: ev.stats for name, ev in evaluators.items()}


def coco_evaluators(
    detectors: dict[str, Detector],
    *,
    root: str,
    split: str,
    categories: list[dict[str, Any]],
    resize: Resize,
    batch_size: int = 8,
    max_images: int | None = None,
    to_original: ToOriginal = stretch_to_original,
) -> dict[str, CocoEvaluator]:
    """Per detector name its evaluated :class:`CocoEvaluator` (``stats``, and ``results`` in pixels).

    ``categories[i]["id"]`` is class i's COCO id (categories named ``N/A``, torchvision's placeholders
    for unused COCO ids, may be absent from the dataset). ``resize`` makes the network input,
    ``to_original`` maps boxes back (the artifact's resize mode).

    Raises:
        ValueError: the model's category ids are not categories of the dataset (AP would be meaningless).
    """
    _, annotation_file = resolve_split(root, split)
    coco_gt = load_coco(annotation_file)
    category_ids = [int(c["id"]) for c in categories]
    placeholders = {int(c["id"]) for c in categories if c.get("name") == "N/A"}
    unknown = sorted(set(category_ids) - set(coco_gt.getCatIds()) - placeholders)
    if unknown:
        raise ValueError(
            f"the model's category ids {unknown} are not in {annotation_file}; is this the dataset it was "
            f"trained on?"
        )
    evaluators = {name: CocoEvaluator(coco_gt, iou_types=None) for name in detectors}
    for images, image_ids, sizes in iter_batches(root, split, resize, batch_size, max_images):
        for name, detect in detectors.items():
            results = []
            for dets, image_id, size in zip(detect(images), image_ids, sizes, strict=True):
                results.extend(_results(dets, image_id, size, category_ids, to_original))
            evaluators[name].update(results, image_ids)
    for evaluator in evaluators.values():
        evaluator.accumulate_and_summarize(verbose=False)
    return evaluators

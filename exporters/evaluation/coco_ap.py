"""COCO AP of detectors on a COCO-format split: the exporters' one evaluation path and one AP comparison.

Every detector sees the same uint8 batches (read and resized once), so differences in AP come from the
detectors alone. A detector maps uint8 ``[B, H, W, 3]`` to per-image
:class:`~exporters.evaluation.compare.Detections`
(boxes normalized to the input; mask models add low-resolution masks, scored as ``segm`` after pasting
them into the original image). Results go through training's pycocotools evaluator.

Two sources of batches feed :func:`evaluate`: :func:`split_batches` (an eager-side resize, for verify and
fp16-eval) and `exporters.evaluation.served_eval` (the service's own decoding and resize, for quantize,
display-threshold and ``detect-export eval``). :class:`APComparison` compares two detectors' results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.geometry import resize, stretch_to_original
from exporters.evaluation.compare import Detections
from training.box_ops import xyxy_to_ltwh
from training.coco_eval import CocoEvaluator
from training.data.coco import load_coco, read_image_rgb, resolve_split

Detector = Callable[[np.ndarray], list[Detections]]
Resize = Callable[[np.ndarray], np.ndarray]
# Boxes normalized to the network input [N, 4] + the original (height, width) -> original pixels [N, 4].
ToOriginal = Callable[[np.ndarray, tuple[int, int]], np.ndarray]
Stats = dict[str, float]


@dataclass(frozen=True)
class EvalImage:
    """One evaluated image: its COCO id, original ``(height, width)`` and how its boxes map back there."""

    image_id: int
    size: tuple[int, int]
    to_original: Callable[[np.ndarray], np.ndarray]


# uint8 [B, H, W, 3] network inputs and their images.
Batch = tuple[np.ndarray, list[EvalImage]]


def stretch_resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize ignoring the aspect ratio with `contract.geometry`'s rule (training's and the service's)."""
    return np.asarray(resize(image, width, height), dtype=np.uint8)


def split_batches(
    root: str,
    split: str,
    resize: Resize,
    batch_size: int,
    max_images: int | None = None,
    to_original: ToOriginal = stretch_to_original,
) -> Iterator[Batch]:
    """The split's images in image-id order, read and passed through ``resize``, in batches."""
    images_dir, annotation_file = resolve_split(root, split)
    coco = load_coco(annotation_file)
    ids = sorted(coco.getImgIds())[:max_images]
    for start in range(0, len(ids), batch_size):
        images, evaluated = [], []
        for image_id in ids[start : start + batch_size]:
            image = read_image_rgb(images_dir / coco.imgs[image_id]["file_name"])
            size = (int(image.shape[0]), int(image.shape[1]))
            evaluated.append(EvalImage(image_id, size, functools.partial(_apply, to_original, size=size)))
            images.append(resize(image))
        yield np.stack(images), evaluated


def _apply(to_original: ToOriginal, boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return to_original(boxes, size)


def coco_results(dets: Detections, image: EvalImage, category_ids: list[int]) -> list[dict[str, Any]]:
    """COCO results of one image; masks (if any) pasted into the original image as torchvision does."""
    import torch  # the box conversion is training's (torch); imported here to keep module import light

    from training.masks import masks_to_rles

    pixels = torch.from_numpy(np.ascontiguousarray(image.to_original(dets.boxes), dtype=np.float32))
    boxes = xyxy_to_ltwh(pixels).tolist()
    results = [
        {
            "image_id": int(image.image_id),
            "category_id": category_ids[int(c)],
            "bbox": [round(v, 3) for v in box],
            "score": round(float(s), 5),
        }
        for box, s, c in zip(boxes, dets.scores.tolist(), dets.classes.tolist(), strict=True)
    ]
    if dets.masks is not None and len(results):
        masks = torch.from_numpy(np.asarray(dets.masks, dtype=np.float32))
        for result, rle in zip(results, masks_to_rles(masks, pixels, *image.size), strict=True):
            result["segmentation"] = rle
    return results


def evaluate(
    detectors: dict[str, Detector], batches: Iterable[Batch], coco_gt: Any, category_ids: list[int]
) -> dict[str, CocoEvaluator]:
    """Per detector name its evaluated :class:`CocoEvaluator` (``stats``; ``results`` in pixels).

    ``category_ids[i]`` is class i's COCO category id.
    """
    evaluators = {name: CocoEvaluator(coco_gt, iou_types=None) for name in detectors}
    for images, evaluated in batches:
        image_ids = [image.image_id for image in evaluated]
        for name, detect in detectors.items():
            results = []
            for dets, image in zip(detect(images), evaluated, strict=True):
                results.extend(coco_results(dets, image, category_ids))
            evaluators[name].update(results, image_ids)
    for evaluator in evaluators.values():
        evaluator.accumulate_and_summarize(verbose=False)
    return evaluators


def evaluate_split(
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
    """:func:`evaluate` on a split's files, resized by ``resize`` and mapped back by ``to_original``.

    ``categories[i]["id"]`` is class i's COCO id (categories named ``N/A``, torchvision's placeholders
    for unused COCO ids, may be absent from the dataset).

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
    batches = split_batches(root, split, resize, batch_size, max_images, to_original)
    return evaluate(detectors, batches, coco_gt, category_ids)


@dataclass(frozen=True)
class APComparison:
    """COCO metrics of a candidate (e.g. ONNX, FP16, INT8) against a reference on the same images.

    ``*_segm`` are the mask metrics of mask models (None for box-only detectors).
    """

    reference_name: str
    candidate_name: str
    reference: Stats
    candidate: Stats
    reference_segm: Stats | None = None
    candidate_segm: Stats | None = None

    @classmethod
    def of(
        cls, evaluators: dict[str, CocoEvaluator], reference: str, candidate: str, masks: bool = False
    ) -> APComparison:
        """From :func:`evaluate`'s evaluators; with ``masks`` a side without mask results scores AP 0."""
        segm = {name: ev.stats.get("segm", {"AP": 0.0}) for name, ev in evaluators.items()} if masks else {}
        return cls(
            reference,
            candidate,
            evaluators[reference].stats["bbox"],
            evaluators[candidate].stats["bbox"],
            segm.get(reference),
            segm.get(candidate),
        )

    @property
    def ap_delta(self) -> float:
        """Candidate box AP minus the reference's."""
        return self.candidate["AP"] - self.reference["AP"]

    @property
    def mask_ap_delta(self) -> float | None:
        if self.reference_segm is None or self.candidate_segm is None:
            return None
        return self.candidate_segm["AP"] - self.reference_segm["AP"]

    def within(self, tolerance: float) -> bool:
        """Box AP (and mask AP, if measured) differ by at most ``tolerance`` either way."""
        return all(abs(d) <= tolerance for d in (self.ap_delta, self.mask_ap_delta) if d is not None)

    def to_dict(self) -> dict[str, Any]:
        """``{"<ref>_ap", "<cand>_ap", "ap_delta", "<ref>": metrics, "<cand>": metrics}`` plus, for mask
        models, ``"<ref>_mask_ap", "<cand>_mask_ap", "mask_ap_delta", "<ref>_segm", "<cand>_segm"``."""
        ref, cand = self.reference_name, self.candidate_name
        out: dict[str, Any] = {
            f"{ref}_ap": self.reference["AP"],
            f"{cand}_ap": self.candidate["AP"],
            "ap_delta": self.ap_delta,
            ref: self.reference,
            cand: self.candidate,
        }
        if self.reference_segm is not None and self.candidate_segm is not None:
            out |= {
                f"{ref}_mask_ap": self.reference_segm["AP"],
                f"{cand}_mask_ap": self.candidate_segm["AP"],
                "mask_ap_delta": self.mask_ap_delta,
                f"{ref}_segm": self.reference_segm,
                f"{cand}_segm": self.candidate_segm,
            }
        return out

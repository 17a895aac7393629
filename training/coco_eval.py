"""COCO evaluation through pycocotools: update -> synchronize -> accumulate -> summarize."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from training.distributed import all_gather_objects

METRIC_NAMES: tuple[str, ...] = (
    "AP",
    "AP50",
    "AP75",
    "APs",
    "APm",
    "APl",
    "AR1",
    "AR10",
    "AR100",
    "ARs",
    "ARm",
    "ARl",
)


class CocoEvaluator:
    """Collects detections in the COCO results format and scores them against ``coco_gt``.

    Each result is ``{"image_id", "category_id", "bbox": [x, y, w, h] in pixels, "score"}`` (plus
    ``"segmentation"`` RLE for ``segm``). ``iou_types`` None means ``bbox``, and ``segm`` too when the
    results carry segmentations. Each type is scored on its own view of the results, as torchvision's
    reference does: ``bbox`` without the segmentations, ``segm`` without the boxes (so a detection's area,
    which picks its small/medium/large range, is its mask's).
    """

    def __init__(self, coco_gt: COCO, iou_types: tuple[str, ...] | None = ("bbox",)) -> None:
        self.coco_gt = coco_gt
        self._iou_types = iou_types
        self.results: list[dict[str, Any]] = []
        self.image_ids: list[int] = []
        self.stats: dict[str, dict[str, float]] = {}
        # pycocotools' printed summary (the 12-line table) per IoU type, for logs.
        self.summaries: dict[str, str] = {}
        # Per IoU type, the results as pycocotools loaded them (for per_image_ap; not the evaluator, whose
        # per-image tables are large on a full COCO split).
        self._loaded: dict[str, COCO] = {}

    def update(self, results: list[dict[str, Any]], image_ids: list[int]) -> None:
        self.results.extend(results)
        self.image_ids.extend(int(i) for i in image_ids)

    def synchronize(self) -> None:
        """Merge every rank's results (no-op without a process group)."""
        gathered = all_gather_objects((self.results, self.image_ids))
        self.results = [r for res, _ in gathered for r in res]
        self.image_ids = sorted({i for _, ids in gathered for i in ids})

    @property
    def iou_types(self) -> tuple[str, ...]:
        if self._iou_types is not None:
            return self._iou_types
        return ("bbox", "segm") if any("segmentation" in r for r in self.results) else ("bbox",)

    def accumulate_and_summarize(self, verbose: bool = True) -> dict[str, dict[str, float]]:
        """Run COCOeval per IoU type; returns ``{iou_type: {metric name: value}}`` (12 metrics each)."""
        for iou_type in self.iou_types:
            if not self.results:  # pycocotools cannot load an empty result list: nothing found scores 0
                self.stats[iou_type] = dict.fromkeys(METRIC_NAMES, 0.0)
                continue
            drop = "bbox" if iou_type == "segm" else "segmentation"
            # loadRes mutates what it is given; keep ours intact for writing out later.
            with contextlib.redirect_stdout(io.StringIO()):
                coco_dt = self.coco_gt.loadRes(
                    [{k: v for k, v in r.items() if k != drop} for r in self.results]
                )
            evaluator = COCOeval(self.coco_gt, coco_dt, iou_type)
            evaluator.params.imgIds = self.image_ids or sorted(self.coco_gt.getImgIds())
            self._loaded[iou_type] = coco_dt
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                evaluator.evaluate()
                evaluator.accumulate()
                evaluator.summarize()
            self.summaries[iou_type] = out.getvalue()
            if verbose:
                print(f"COCO {iou_type}:\n{out.getvalue()}", end="")
            stats = np.asarray(evaluator.stats, dtype=float)
            self.stats[iou_type] = {name: float(v) for name, v in zip(METRIC_NAMES, stats, strict=True)}
        return self.stats

    def per_image_ap(self, iou_type: str = "bbox") -> dict[int, float]:
        """AP@[.5:.95] of each evaluated image alone (pycocotools run with ``params.imgIds = [id]``), after
        :meth:`accumulate_and_summarize`; 0 where it is undefined (an image without ground truth) and for
        every image when nothing was detected."""
        loaded = self._loaded.get(iou_type)
        ids = self.image_ids or sorted(self.coco_gt.getImgIds())
        if loaded is None:
            return dict.fromkeys(ids, 0.0)
        per_image = {}
        for image_id in ids:
            evaluator = COCOeval(self.coco_gt, loaded, iou_type)
            evaluator.params.imgIds = [image_id]
            with contextlib.redirect_stdout(io.StringIO()):
                evaluator.evaluate()
                evaluator.accumulate()
            # precision[T, R, K, A, M]: every IoU threshold, recall level and class; all areas, 100 dets.
            precision = evaluator.eval["precision"][:, :, :, 0, -1]
            defined = precision[precision > -1]
            per_image[image_id] = float(defined.mean()) if defined.size else 0.0
        return per_image

    def write_results(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.results))
        return path

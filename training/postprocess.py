"""The one post-processing configuration every architecture's detections go through, the ONNX-exportable
NonMaxSuppression, and the per-image detections the eager references return.

:class:`PostprocessSettings` drives both the exported graph (``exporters.onnx.postprocess_graph``) and each
architecture's eager post-processing (``training/detectors/<name>/postprocess.py``), so a wrapper passes one
object through instead of copying its fields.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchvision.ops import nms

from contract.manifest import MASK_OUTPUT

# TensorRT (10.x, 11.x) requires TopK's K to be less than 3840.
TENSORRT_MAX_TOPK = 3839


@dataclass(frozen=True)
class PostprocessSettings:
    """Thresholds of the in-graph post-processing; the same values drive the eager reference."""

    score_threshold: float = 0.05
    iou_threshold: float = 0.5
    topk_per_class: int = 200
    max_detections: int = 100
    # Candidates over all classes together instead of ``topk_per_class`` per class (None: per class).
    pre_nms_topk: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.score_threshold < 1.0:
            raise ValueError(f"score_threshold must be in [0, 1), got {self.score_threshold}")
        if not 0.0 <= self.iou_threshold <= 1.0:
            raise ValueError(f"iou_threshold must be in [0, 1], got {self.iou_threshold}")
        if not 1 <= self.topk_per_class <= TENSORRT_MAX_TOPK:
            raise ValueError(
                f"topk_per_class must be in 1..{TENSORRT_MAX_TOPK} (TensorRT), got {self.topk_per_class}"
            )
        if not 1 <= self.max_detections <= TENSORRT_MAX_TOPK:
            raise ValueError(
                f"max_detections must be in 1..{TENSORRT_MAX_TOPK} (TensorRT), got {self.max_detections}"
            )
        if self.pre_nms_topk is not None and not 1 <= self.pre_nms_topk <= TENSORRT_MAX_TOPK:
            raise ValueError(
                f"pre_nms_topk must be in 1..{TENSORRT_MAX_TOPK} (TensorRT), got {self.pre_nms_topk}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _NonMaxSuppression(torch.autograd.Function):
    """ONNX ``NonMaxSuppression`` (center_point_box 0) with an eager implementation of the same contract.

    ``boxes [G, N, 4]``, ``scores [G, C, N]`` -> ``selected [M, 3]`` int64 rows ``(group, class, box
    index)``; per (group, class) a box is a candidate when its score > ``score_threshold``; a kept box
    suppresses later boxes of the same (group, class) with IoU > ``iou_threshold``; at most
    ``max_per_group`` are kept per (group, class).

    The legacy TorchScript exporter calls :meth:`symbolic` instead of tracing :meth:`forward`, so the
    graph holds one NonMaxSuppression node; the eager forward only has to agree with that node, and the
    exporter needs it to trace the ops after it.
    """

    @staticmethod
    def forward(
        ctx: Any,
        boxes: Tensor,
        scores: Tensor,
        max_per_group: int,
        iou_threshold: float,
        score_threshold: float,
    ) -> Tensor:
        rows = []
        # While exporting, this eager body only feeds example values to the trace (the graph gets the
        # symbolic), so the tracer's warnings about its data-dependent Python control flow do not apply.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # type: ignore[attr-defined]  # re-exported by torch.jit without __all__
            for group in range(int(scores.shape[0])):
                for cls in range(int(scores.shape[1])):
                    group_scores = scores[group, cls]
                    candidates = torch.nonzero(group_scores > score_threshold).squeeze(1)
                    keep = nms(boxes[group, candidates], group_scores[candidates], iou_threshold)
                    kept = candidates[keep[:max_per_group]]
                    rows.append(
                        torch.stack([torch.full_like(kept, group), torch.full_like(kept, cls), kept], dim=1)
                    )
        if not rows:
            return torch.zeros((0, 3), dtype=torch.int64, device=boxes.device)
        return torch.cat(rows)

    @staticmethod
    def symbolic(
        g: Any, boxes: Any, scores: Any, max_per_group: int, iou_threshold: float, score_threshold: float
    ) -> Any:
        return g.op(
            "NonMaxSuppression",
            boxes,
            scores,
            g.op("Constant", value_t=torch.tensor([max_per_group], dtype=torch.int64)),
            g.op("Constant", value_t=torch.tensor([iou_threshold], dtype=torch.float32)),
            g.op("Constant", value_t=torch.tensor([score_threshold], dtype=torch.float32)),
            center_point_box_i=0,
        )


def non_max_suppression(
    boxes: Tensor, scores: Tensor, max_per_group: int, iou_threshold: float, score_threshold: float
) -> Tensor:
    """See :class:`_NonMaxSuppression` (exported as one ONNX ``NonMaxSuppression`` node)."""
    selected = _NonMaxSuppression.apply(boxes, scores, max_per_group, iou_threshold, score_threshold)
    assert isinstance(selected, Tensor)
    return selected


@dataclass(frozen=True)
class Detections:
    """One image's detections: ``boxes [N, 4]`` normalized x1y1x2y2, ``scores [N]``, ``classes [N]``,
    and for mask models ``masks [N, Mh, Mw]`` (low-resolution probabilities in each box's frame)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    masks: np.ndarray | None = None

    @classmethod
    def from_contract(cls, outputs: dict[str, np.ndarray]) -> list[Detections]:
        """Split the padded contract outputs into per-image detections (rows < num_detections)."""
        result = []
        masks = outputs.get(MASK_OUTPUT)
        for i, n in enumerate(outputs["num_detections"].reshape(-1).tolist()):
            result.append(
                cls(
                    outputs["detection_boxes"][i, :n],
                    outputs["detection_scores"][i, :n],
                    outputs["detection_classes"][i, :n].astype(np.int64),
                    None if masks is None else masks[i, :n],
                )
            )
        return result

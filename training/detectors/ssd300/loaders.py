"""One entry point per use: the SSD300 training loader (DALI or plain PyTorch) and the evaluation loader.

Both training kinds yield the same triple, so the train loop does not know which one it has:

- ``images`` float32 ``[N, 3, 300, 300]``, RGB scaled to 0-1 then ImageNet-normalized;
- ``boxes`` float32 ``[N, 8732, 4]``, per default box the matched ground truth in centre form
  (cx, cy, w, h) normalized to 0-1, or the default box itself where unmatched;
- ``labels`` int64 ``[N, 8732]``, contiguous labels (0 = background).

Each has ``len()`` (full batches per epoch, the last partial batch dropped, equal on every DDP rank)
and ``set_epoch(epoch)`` (call before each epoch). The DALI kind yields tensors on its device
(``cuda:<current device>`` when CUDA is available, else the CPU); the torch kind yields CPU tensors
(pinned when CUDA is available).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from training.data.coco import CocoDetection, Transform
from training.data.loader import LoaderRequest, TorchTrainLoader, TrainLoader, choose_loader, ordered_loader
from training.detectors.ssd300.default_boxes import default_boxes_xyxy
from training.detectors.ssd300.targets import assign_targets
from training.detectors.ssd300.transforms import SSDEvalTransform, SSDTrainTransform

__all__ = [
    "SSDEvalCollate",
    "SSDTrainCollate",
    "build_ssd_eval_loader",
    "ssd_train_loader",
]

SSD_SIZE = 300
Batch = tuple[Tensor, Tensor, Tensor]


class SSDTrainCollate:
    """Stack transformed samples and match their boxes to the default boxes (runs in the workers).

    Input: ``(image [3, S, S], target)`` pairs from :class:`SSDTrainTransform`. Output: the training
    triple described in the module docstring, via :func:`assign_targets` (DALI ``box_encoder``'s rule).
    """

    def __init__(self, dboxes_xyxy: Tensor, iou_threshold: float = 0.5) -> None:
        self.dboxes_xyxy = dboxes_xyxy
        self.iou_threshold = iou_threshold

    def __call__(self, batch: Sequence[tuple[Tensor, dict[str, Any]]]) -> Batch:
        images = torch.stack([image for image, _ in batch])
        encoded = [
            assign_targets(t["boxes"], t["labels"], self.dboxes_xyxy, self.iou_threshold) for _, t in batch
        ]
        boxes = torch.stack([b for b, _ in encoded])
        labels = torch.stack([lab for _, lab in encoded])
        return images, boxes, labels


class SSDEvalCollate:
    """``(images [N, 3, S, S], image_ids list[int], orig_sizes list[(h, w)])``."""

    def __call__(
        self, batch: Sequence[tuple[Tensor, dict[str, Any]]]
    ) -> tuple[Tensor, list[int], list[tuple[int, int]]]:
        images = torch.stack([image for image, _ in batch])
        image_ids = [int(t["image_id"]) for _, t in batch]
        sizes = [(int(t["orig_size"][0]), int(t["orig_size"][1])) for _, t in batch]
        return images, image_ids, sizes


def ssd_train_loader(
    request: LoaderRequest,
    *,
    size: int = SSD_SIZE,
    transforms: Transform | None = None,
    anchors_xyxy: Tensor | None = None,
    dali_options: dict[str, Any] | None = None,
) -> TrainLoader:
    """An SSD-style training loader of ``request.kind`` (see the module docstring for what it yields):
    SSD300's by default; ``transforms`` (torch), ``dali_options`` (the DALI pipeline's crop and colour
    options, see :func:`training.detectors.ssd300.dali.build_ssd_train_pipeline`) and ``anchors_xyxy`` give
    another SSD-style detector its own augmentation and anchors."""
    r = request

    def dali() -> TrainLoader:
        from training.detectors.ssd300.dali import DaliSSDLoader

        return DaliSSDLoader(
            **r.dali_args(),
            size=size,
            anchors_xyxy=anchors_xyxy,
            **(dali_options or {}),
        )

    def torch_loader() -> TrainLoader:
        # Images without usable boxes are skipped (as DALI's ``skip_empty``).
        train_transforms = transforms or SSDTrainTransform(SSD_SIZE, r.seed)
        dataset = CocoDetection(r.root, r.split, transforms=train_transforms, skip_empty=True)
        collate = SSDTrainCollate(default_boxes_xyxy() if anchors_xyxy is None else anchors_xyxy)
        return TorchTrainLoader(dataset, collate, r)

    return choose_loader(request, torch_loader, dali)


def build_ssd_eval_loader(
    root: str | Path, split: str, batch_size: int, workers: int, size: int = SSD_SIZE
) -> DataLoader[Any]:
    """Every image of ``split`` in image-id order, resized to ``size x size`` (300) and normalized.

    Yields ``(images float32 [N, 3, size, size], image_ids list[int], orig_sizes list[(height, width)])``;
    the dataset (with its pycocotools ``coco`` index and ``label_map``) is ``loader.dataset``.
    """
    dataset = CocoDetection(root, split, transforms=SSDEvalTransform(size))
    return ordered_loader(dataset, SSDEvalCollate(), batch_size, workers)

"""EfficientDet's training loss: effdet's anchor labeller, focal loss and Huber box loss.

Labelling (effdet ``AnchorLabeler``, TF's target assigner): IoU of every anchor with every ground-truth
box; an anchor is positive for its best box at IoU >= 0.5, and every box is forced onto its best anchor;
box targets are Faster R-CNN codes (ty, tx, th, tw) without scaling. Loss (effdet ``DetectionLoss``):
sigmoid focal loss (alpha 0.25, gamma 1.5) over all anchors and classes plus 50 x Huber loss
(delta 0.1) over the positive anchors' codes, both divided by the batch's positives + 1.
"""

from __future__ import annotations

from typing import Any, cast

from torch import Tensor, nn

from training.detectors.efficientdet.effdet_compat import AnchorLabeler, Anchors, DetectionLoss

__all__ = ["EfficientDetLoss"]

MATCH_IOU = 0.5


class EfficientDetLoss(nn.Module):
    """``(class_outputs, box_outputs, boxes, labels) -> loss`` (a scalar tensor).

    Args of ``forward``: the model's two output lists (see ``training.detectors.efficientdet.model``);
    ``boxes`` float32 ``[N, M, 4]`` x1, y1, x2, y2 in pixels of the network input; ``labels`` int64
    ``[N, M]``, contiguous 1..C, -1 for padding (ignored). The anchors are a buffer: ``.to(device)``
    moves them with the module, so labelling runs where the batch is.
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.anchors = Anchors.from_config(config)  # module: its ``boxes`` buffer follows .to()
        self.labeler = AnchorLabeler(self.anchors, config.num_classes, match_threshold=MATCH_IOU)
        self.detection_loss = DetectionLoss(config)
        self.last: dict[str, float] = {}

    def forward(
        self, class_outputs: list[Tensor], box_outputs: list[Tensor], boxes: Tensor, labels: Tensor
    ) -> Tensor:
        if boxes.dim() != 3 or boxes.shape[-1] != 4 or labels.shape != boxes.shape[:2]:
            raise ValueError(
                f"boxes must be [N, M, 4] and labels [N, M], "
                f"got {tuple(boxes.shape)} and {tuple(labels.shape)}"
            )
        boxes_yxyx = boxes.float()[..., [1, 0, 3, 2]]  # effdet's labeller takes y1, x1, y2, x2
        cls_targets, box_targets, num_positives = self.labeler.batch_label_anchors(boxes_yxyx, labels.float())
        loss, class_loss, box_loss = self.detection_loss(
            class_outputs, box_outputs, cls_targets, box_targets, num_positives
        )
        self.last = {"class_loss": float(class_loss.detach()), "box_loss": float(box_loss.detach())}
        return cast("Tensor", loss)

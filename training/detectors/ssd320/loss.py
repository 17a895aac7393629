"""SSD320 loss: sigmoid focal loss + smooth L1, normalized by the number of matched anchors (TF's config).

    loss = (sum over anchors and classes of focal(alpha 0.25, gamma 2)
            + sum over matched anchors and 4 coordinates of smooth_l1(beta 1) / 4) / max(1, matches)

The focal term is ``torchvision.ops.sigmoid_focal_loss``; unmatched anchors are all-zero class targets
(there is no background class); matches are counted over the whole batch (TF's normalizer), and the
localization term is also divided by the code size 4 (``normalize_loc_loss_by_codesize``).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import sigmoid_focal_loss

from training.box_ops import encode_boxes

# TF's Faster R-CNN box coder scales (y 10, x 10, h 5, w 5), in this project's (x, y, w, h) order.
BOX_CODE_WEIGHTS = (10.0, 10.0, 5.0, 5.0)


class FocalLoss(nn.Module):
    def __init__(self, anchors_xywh: Tensor, alpha: float = 0.25, gamma: float = 2.0) -> None:
        super().__init__()
        self.anchors: Tensor
        self.register_buffer("anchors", anchors_xywh.unsqueeze(0), persistent=False)  # (1, A, 4)
        self.alpha = alpha
        self.gamma = gamma

    def forward(
        self, box_regression: Tensor, cls_logits: Tensor, gt_boxes: Tensor, gt_labels: Tensor
    ) -> Tensor:
        """
        Args:
            box_regression: ``[N, A, 4]`` predicted codes; cls_logits: ``[N, A, C]``.
            gt_boxes: ``[N, A, 4]`` matched boxes in centre form, normalized (unmatched rows: anything
                finite, e.g. the anchor itself); gt_labels: ``[N, A]`` int64, 0 = unmatched, else 1..C.
        """
        box_regression, cls_logits = box_regression.float(), cls_logits.float()
        positive = gt_labels > 0
        num_matches = positive.sum().clamp(min=1).to(cls_logits.dtype)

        # (N, A) labels -> (N, A, C) one-hot targets, all zero where unmatched (no background column)
        targets = torch.zeros_like(cls_logits)
        image, anchor = positive.nonzero(as_tuple=True)
        targets[image, anchor, gt_labels[image, anchor] - 1] = 1.0
        cls_loss = sigmoid_focal_loss(cls_logits, targets, self.alpha, self.gamma, reduction="sum")

        box_targets = encode_boxes(
            gt_boxes[positive], self.anchors.expand_as(gt_boxes)[positive], BOX_CODE_WEIGHTS
        )
        box_loss = F.smooth_l1_loss(box_regression[positive], box_targets, beta=1.0, reduction="sum")
        return cast("Tensor", (cls_loss + box_loss / 4.0) / num_matches)

"""SSD300 loss: smooth L1 on positives + cross-entropy with 3:1 hard negative mining (NVIDIA's ``Loss``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from training.box_ops import encode_boxes

BOX_CODE_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # 1 / scale_xy, 1 / scale_xy, 1 / scale_wh, 1 / scale_wh


class SSDLoss(nn.Module):
    """Per image: (sum of smooth L1 over positives + CE over positives and the 3 x P hardest negatives) / P.

    Images without positives contribute 0; the result is the mean over the batch.
    """

    def __init__(self, dboxes_xywh: Tensor, neg_pos_ratio: int = 3) -> None:
        super().__init__()
        # (1, A, 4): centre-form default boxes, broadcast over the batch
        self.dboxes: Tensor
        self.register_buffer("dboxes", dboxes_xywh.unsqueeze(0), persistent=False)
        self.neg_pos_ratio = neg_pos_ratio

    def forward(self, locs: Tensor, confs: Tensor, gt_boxes: Tensor, gt_labels: Tensor) -> Tensor:
        """
        Args:
            locs: ``[N, 4, A]`` predicted codes; confs: ``[N, C + 1, A]`` logits.
            gt_boxes: ``[N, A, 4]`` matched boxes in centre form (normalized); gt_labels: ``[N, A]`` int64.
        """
        locs, confs = locs.float(), confs.float()
        positive = gt_labels > 0  # (N, A)
        num_pos = positive.sum(dim=1)  # (N,)

        targets = encode_boxes(gt_boxes, self.dboxes, BOX_CODE_WEIGHTS)  # (N, A, 4)
        box_loss = F.smooth_l1_loss(locs.transpose(1, 2), targets, reduction="none").sum(dim=2)
        box_loss = (box_loss * positive).sum(dim=1)

        ce = F.cross_entropy(confs, gt_labels, reduction="none")  # (N, A)
        # Hard negatives: rank the negatives by loss, keep the top neg_pos_ratio x P per image.
        neg_ce = ce.masked_fill(positive, 0.0)
        rank = neg_ce.argsort(dim=1, descending=True).argsort(dim=1)
        num_neg = torch.clamp(self.neg_pos_ratio * num_pos, max=positive.shape[1]).unsqueeze(1)
        negative = rank < num_neg
        cls_loss = (ce * (positive | negative)).sum(dim=1)

        has_pos = (num_pos > 0).float()
        per_image = (box_loss + cls_loss) * has_pos / num_pos.float().clamp(min=1e-6)
        return per_image.mean()

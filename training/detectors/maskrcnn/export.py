"""Mask R-CNN export wrapper: torchvision's two stages rewritten for a dynamic batch, masks left unpasted.

torchvision's own ONNX export of Mask R-CNN is only correct at the batch size it was traced with (its
RoI pooling builds the per-image box lists in a Python loop) and pastes the masks into the image with
a traced loop that TensorRT cannot take. Here the same modules and weights run in a graph built from
batch-independent ops, with the same arithmetic (torchvision's box coders and heads, called as they are):

network (raw outputs, dense, compared with eager):
    backbone + FPN -> ``fpn_p2 .. fpn_pool``; RPN head -> ``rpn_objectness [B, N]``, ``rpn_deltas
    [B, N, 4]`` (torchvision's anchor order: level, then y, x, anchor)
decoder (-> the common layout of ``exporters.onnx.postprocess_graph``, class-specific boxes):
    per level the ``pre_nms_top_n`` best anchors by logit -> decode against the constant anchors, clip,
    sigmoid; boxes under 1e-3 px dropped -> NonMaxSuppression per (image, level) at ``rpn_nms_thresh``
    -> the ``post_nms_top_n`` = P best proposals per image (padding rows marked invalid) -> multi-scale
    RoIAlign 7x7 -> box head -> per-class decoded, clipped boxes ``[B, C, P, 4]`` (normalized) and
    softmax scores ``[B, C, P]`` (background dropped; boxes under 1e-2 px and invalid proposals -1)
post-processing: ``DetectionPostprocess`` with every proposal kept per class (torchvision has no
    per-class top-k): score > ``box_score_thresh``, NMS per class, the best ``detections_per_img``
masks (after the detections): multi-scale RoIAlign 14x14 of the valid detections only (NonZero, so
    the mask head's cost follows the number of detections, not K) -> mask head -> the detected class's
    channel -> sigmoid -> ``detection_masks [B, K, 28, 28]``, padding rows zero. The service pastes
    them into the image (``service.imaging.masks``, torchvision's paste).

Multi-scale RoIAlign assigns each box to one FPN level (torchvision's ``LevelMapper``) and runs ONNX
``RoiAlign`` per level on that level's boxes (NonZero + Gather, merged with ScatterND), as torchvision's
own tracing path does. The eager reference is torchvision's RPN ``filter_proposals`` and ``RoIHeads``
run on the raw outputs (``eager_detections``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, ClassVar, cast

import numpy as np
import torch
import torchvision  # noqa: F401 - registers torch.ops.torchvision
from torch import Tensor, nn
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.image_list import ImageList

from training.checkpoint import Checkpoint
from training.data.letterbox import letterbox_resize
from training.detectors.export import ExportWrapper
from training.detectors.maskrcnn.model import PAD_VALUE, normalize
from training.postprocess import Detections, PostprocessSettings, non_max_suppression

FEATURE_NAMES = ("0", "1", "2", "3", "pool")  # torchvision's FPN output keys
RAW_NAMES = ("rpn_objectness", "rpn_deltas", "fpn_p2", "fpn_p3", "fpn_p4", "fpn_p5", "fpn_pool")
RPN_MIN_SIZE = 1e-3  # torchvision RegionProposalNetwork.min_size
BOX_MIN_SIZE = 1e-2  # torchvision RoIHeads.postprocess_detections: remove_small_boxes(min_size=1e-2)


def _row_index(like: Tensor) -> Tensor:
    """int64 ``[B, P]`` holding each row's batch index, for any batch size (no Python ``range(B)``)."""
    return torch.ones_like(like, dtype=torch.int64).cumsum(0) - 1


def _clip(boxes: Tensor, height: int, width: int) -> Tensor:
    """torchvision ``clip_boxes_to_image`` for boxes ``[..., 4]``."""
    x = boxes[..., 0::2].clamp(min=0, max=width)
    y = boxes[..., 1::2].clamp(min=0, max=height)
    return torch.stack((x, y), dim=-1).reshape(boxes.shape)


def _small(boxes: Tensor, min_size: float) -> Tensor:
    """torchvision ``remove_small_boxes``' complement: width or height below ``min_size``."""
    return ((boxes[..., 2] - boxes[..., 0]) < min_size) | ((boxes[..., 3] - boxes[..., 1]) < min_size)


class MultiScaleRoIAlign(nn.Module):
    """torchvision ``MultiScaleRoIAlign`` for a flat list of boxes with their batch index.

    Levels as torchvision's ``LevelMapper`` (k = floor(4 + log2(sqrt(area) / 224) + 1e-6), clamped to the
    feature levels); each level's boxes go through ``roi_align`` (aligned=False, as torchvision) on their
    own and are merged back in the input order.
    """

    def __init__(self, scales: list[float], output_size: int, sampling_ratio: int, channels: int) -> None:
        super().__init__()
        self.scales = scales
        self.k_min = -math.log2(scales[0])
        self.k_max = -math.log2(scales[-1])
        self.output_size = output_size
        self.sampling_ratio = sampling_ratio
        self.channels = channels

    def levels(self, boxes: Tensor) -> Tensor:
        """int64 level index (0 = the first feature map) of each ``[R, 4]`` box."""
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        k = torch.floor(4.0 + torch.log2(torch.sqrt(area) / 224.0) + 1e-6)
        return (k.clamp(min=self.k_min, max=self.k_max) - self.k_min).to(torch.int64)

    def forward(self, features: list[Tensor], boxes: Tensor, batch_index: Tensor) -> Tensor:
        """``features`` [B, C, h_l, w_l] per level, ``boxes`` [R, 4] pixels, ``batch_index`` [R] int64
        -> ``[R, C, S, S]``."""
        rois = torch.cat([batch_index.to(boxes.dtype).unsqueeze(1), boxes], dim=1)  # (R, 5)
        levels = self.levels(boxes)
        size = self.output_size
        result = boxes.new_zeros((boxes.shape[0], self.channels, size, size))
        for level, (feature, scale) in enumerate(zip(features, self.scales, strict=True)):
            index = torch.nonzero(levels == level).squeeze(1)
            # The op itself (exported by torchvision's RoiAlign symbolic): torchvision.ops.roi_align's Python
            # shape assertions would only be baked into the trace as constants.
            pooled = torch.ops.torchvision.roi_align(
                feature, rois[index], scale, size, size, self.sampling_ratio, False
            )
            result = result.index_put((index,), pooled)  # ScatterND
        return result


class MaskRCNNNetwork(nn.Module):
    """Normalized ``[B, 3, S, S]`` -> ``(rpn_objectness [B, N], rpn_deltas [B, N, 4], p2..p5, pool)``."""

    def __init__(self, model: MaskRCNN, level_shapes: list[tuple[int, int]]) -> None:
        super().__init__()
        self.backbone = model.backbone
        self.rpn_head = model.rpn.head
        self.anchors_per_location = model.rpn.anchor_generator.num_anchors_per_location()[0]
        self.level_shapes = level_shapes

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        features = list(self.backbone(images).values())
        logits, deltas = self.rpn_head(features)
        a = self.anchors_per_location
        objectness, regression = [], []
        for (h, w), logit, delta in zip(self.level_shapes, logits, deltas, strict=True):
            # torchvision's permute_and_flatten:
            # (B, A*C, h, w) -> (B, A, C, h, w) -> (B, h, w, A, C) -> (B, h*w*A, C)
            objectness.append(logit.reshape(-1, a, 1, h, w).permute(0, 3, 4, 1, 2).reshape(-1, h * w * a))
            regression.append(delta.reshape(-1, a, 4, h, w).permute(0, 3, 4, 1, 2).reshape(-1, h * w * a, 4))
        return (torch.cat(objectness, dim=1), torch.cat(regression, dim=1), *features)


class MaskRCNNDecoder(nn.Module):
    """Raw outputs -> class-specific boxes ``[B, C, P, 4]`` (normalized) and scores ``[B, C, P]``."""

    anchors: Tensor

    def __init__(
        self, model: MaskRCNN, anchors: Tensor, level_sizes: list[int], scales: list[float], image_size: int
    ) -> None:
        super().__init__()
        rpn, heads = model.rpn, model.roi_heads
        self.register_buffer("anchors", anchors, persistent=False)  # (N, 4) pixels
        self.level_sizes = level_sizes
        self.pre_nms = [min(rpn.pre_nms_top_n(), n) for n in level_sizes]
        self.group = max(self.pre_nms)  # every (image, level) NMS group padded to this many boxes
        self.num_proposals = min(rpn.post_nms_top_n(), sum(self.pre_nms))
        self.rpn_nms_thresh = float(rpn.nms_thresh)
        self.rpn_box_coder = rpn.box_coder
        self.box_coder = heads.box_coder
        self.box_head = heads.box_head
        self.box_predictor = heads.box_predictor
        pool = heads.box_roi_pool
        self.box_pool = MultiScaleRoIAlign(
            scales[:4],
            int(pool.output_size[0]),
            int(pool.sampling_ratio),
            int(model.backbone.out_channels),
        )
        self.image_size = image_size
        self.num_classes = int(heads.box_predictor.cls_score.out_features) - 1

    def proposals(self, objectness: Tensor, deltas: Tensor) -> tuple[Tensor, Tensor]:
        """torchvision's ``RegionProposalNetwork.filter_proposals`` at test time, batched:
        ``(proposals [B, P, 4] pixels, valid [B, P])``, best first."""
        size, k = self.image_size, self.group
        boxes, scores = [], []
        start = 0
        for n, top_n in zip(self.level_sizes, self.pre_nms, strict=True):
            logits, index = objectness[:, start : start + n].topk(top_n, dim=1)  # (B, top_n)
            codes = deltas[:, start : start + n].gather(1, index.unsqueeze(2).expand(-1, -1, 4))
            anchors = self.anchors[start : start + n][index]  # (B, top_n, 4)
            decoded = self.rpn_box_coder.decode_single(codes.reshape(-1, 4), anchors.reshape(-1, 4))
            level_boxes = _clip(decoded.reshape(-1, top_n, 4), size, size)
            prob = torch.sigmoid(logits)
            prob = torch.where(_small(level_boxes, RPN_MIN_SIZE), torch.full_like(prob, -1.0), prob)
            if top_n < k:  # pad the group: zero boxes that can never be selected
                pad = k - top_n
                level_boxes = torch.cat(
                    [level_boxes, torch.zeros_like(level_boxes[:, :1]).expand(-1, pad, -1)], 1
                )
                prob = torch.cat([prob, torch.full_like(prob[:, :1], -1.0).expand(-1, pad)], 1)
            boxes.append(level_boxes)
            scores.append(prob)
            start += n
        levels = len(self.level_sizes)
        cand_boxes = torch.stack(boxes, dim=1)  # (B, L, k, 4)
        cand_scores = torch.stack(scores, dim=1)  # (B, L, k)
        # One NMS group per (image, level): (B*L, k, 4), (B*L, 1, k). Dropped boxes are -1, real scores
        # are sigmoids >= 0: -0.5 separates them whichever way a runtime compares.
        selected = non_max_suppression(
            cand_boxes.reshape(-1, k, 4),
            cand_scores.reshape(-1, 1, k),
            max_per_group=k,
            iou_threshold=self.rpn_nms_thresh,
            score_threshold=-0.5,
        )
        flat = selected[:, 0] * k + selected[:, 2]
        flat_scores = cand_scores.reshape(-1)
        kept = torch.full_like(flat_scores, -1.0).index_put((flat,), flat_scores[flat])  # ScatterND
        top_scores, top_index = kept.reshape(-1, levels * k).topk(self.num_proposals, dim=1)  # (B, P)
        proposals = cand_boxes.reshape(-1, levels * k, 4).gather(1, top_index.unsqueeze(2).expand(-1, -1, 4))
        return proposals, top_scores >= 0.0

    def forward(self, objectness: Tensor, deltas: Tensor, *features: Tensor) -> tuple[Tensor, Tensor]:
        proposals, valid = self.proposals(objectness, deltas)
        num_classes, num_proposals, size = self.num_classes, self.num_proposals, self.image_size
        rois = proposals.reshape(-1, 4)  # (B*P, 4)
        pooled = self.box_pool(list(features[:4]), rois, _row_index(valid).reshape(-1))
        class_logits, box_regression = self.box_predictor(self.box_head(pooled))
        # torchvision RoIHeads.postprocess_detections: decode per class, clip, softmax, drop background
        decoded = self.box_coder.decode_single(box_regression, rois).reshape(-1, num_classes + 1, 4)
        decoded = _clip(decoded, size, size)[:, 1:]  # (B*P, C, 4)
        scores = torch.softmax(class_logits, -1)[:, 1:]  # (B*P, C)
        dropped = _small(decoded, BOX_MIN_SIZE) | ~valid.reshape(-1, 1)
        scores = torch.where(dropped, torch.full_like(scores, -1.0), scores)
        # (B*P, C, 4) -> (B, P, C, 4) -> (B, C, P, 4), normalized to the input
        boxes = (decoded / float(size)).reshape(-1, num_proposals, num_classes, 4).permute(0, 2, 1, 3)
        scores = scores.reshape(-1, num_proposals, num_classes).permute(0, 2, 1)  # (B, C, P)
        return boxes.contiguous(), scores.contiguous()


class MaskRCNNMaskHead(nn.Module):
    """``(raw outputs, contract outputs)`` -> ``detection_masks [B, K, M, M]`` (padding rows zero)."""

    def __init__(self, model: MaskRCNN, scales: list[float], image_size: int) -> None:
        super().__init__()
        heads = model.roi_heads
        pool = heads.mask_roi_pool
        self.mask_pool = MultiScaleRoIAlign(
            scales[:4], int(pool.output_size[0]), int(pool.sampling_ratio), int(model.backbone.out_channels)
        )
        self.mask_head = heads.mask_head
        self.mask_predictor = heads.mask_predictor
        self.image_size = image_size
        self.mask_size = 2 * int(pool.output_size[0])  # the predictor's 2x transposed convolution

    def forward(self, raw: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> Tensor:
        num_detections, boxes, _, classes = outputs
        k, m = boxes.shape[1], self.mask_size
        row = torch.ones_like(classes, dtype=torch.int64).cumsum(1) - 1  # (B, K): 0..K-1
        valid = (row < num_detections.to(torch.int64)).reshape(-1)
        index = torch.nonzero(valid).squeeze(1)  # only real detections reach the mask head
        rois = boxes.reshape(-1, 4)[index] * float(self.image_size)
        batch_index = _row_index(classes).reshape(-1)[index]
        pooled = self.mask_pool(list(raw[2:6]), rois, batch_index)
        logits = self.mask_predictor(self.mask_head(pooled))  # (R, C+1, M, M)
        channel = classes.reshape(-1)[index].to(torch.int64) + 1  # contract index 0..C-1 -> label 1..C
        picked = logits.gather(1, channel.reshape(-1, 1, 1, 1).expand(-1, 1, m, m)).squeeze(1)
        masks = picked.new_zeros((valid.shape[0], m, m)).index_put((index,), picked.sigmoid())
        return cast("Tensor", masks.reshape(-1, k, m, m))


class MaskRCNNWrapper(ExportWrapper):
    architecture = "maskrcnn_resnet50_fpn"
    raw_output_names: ClassVar[tuple[str, ...]] = RAW_NAMES
    resize_mode = "letterbox"
    pad_value = PAD_VALUE
    # Measured (random-weight R50-FPN at 320, ONNX Runtime vs PyTorch, FP32): scores differ by up to
    # 1.2e-5 and mask probabilities by 1.5e-3 after the RoI heads; a wrong level, box or class channel
    # moves them by 0.1 or more.
    tolerance_floors: ClassVar[dict[str, float]] = {"score": 1e-4, "mask": 1e-2}
    # The box and mask heads (fully connected / convolution layers on RoIAlign features) run in FP16
    # like the backbone; RoIAlign, box decoding, softmax, NMS and the mask sigmoid stay FP32.
    fp16_scopes: ClassVar[tuple[str, ...]] = (
        "/decoder/box_head/",
        "/decoder/box_predictor/",
        "/masks/mask_head/",
        "/masks/mask_predictor/",
    )
    # INT8: the RoI heads stay fp32. They run on RoIAlign crops whose value range differs per box and
    # level, so one calibrated scale per tensor fits them badly; the backbone, FPN and RPN are quantized.
    int8_ignored_patterns: ClassVar[tuple[str, ...]] = (
        r"/decoder/box_head/.*",
        r"/decoder/box_predictor/.*",
        r"/masks/mask_head/.*",
        r"/masks/mask_predictor/.*",
        r".*RoiAlign.*",
    )

    def __init__(self, checkpoint: Checkpoint, network: nn.Module) -> None:
        super().__init__(checkpoint, network)
        model = self.network
        if not isinstance(model, MaskRCNN):
            raise TypeError(f"{self.architecture} checkpoint built a {type(model).__name__}, not MaskRCNN")
        self.model = model
        self.image_size = int(checkpoint.model_args.get("image_size", model.transform.max_size))
        size = self.image_size
        with torch.no_grad():
            dummy = torch.zeros(1, 3, size, size)
            features = list(model.backbone(dummy).values())
            self.level_shapes = [(int(f.shape[2]), int(f.shape[3])) for f in features]
            anchors = model.rpn.anchor_generator(ImageList(dummy, [(size, size)]), features)[0]
        self.anchors = anchors  # (N, 4) pixels, torchvision's order
        per_location = model.rpn.anchor_generator.num_anchors_per_location()[0]
        self.level_sizes = [h * w * per_location for h, w in self.level_shapes]
        self.scales = [2.0 ** round(math.log2(h / size)) for h, _ in self.level_shapes]
        self.network = MaskRCNNNetwork(model, self.level_shapes).eval()

    # ------------------------------------------------------------------ metadata
    @property
    def num_proposals(self) -> int:
        rpn = self.model.rpn  # in eval mode: its test-time top-n
        return cast(
            "int", min(rpn.post_nms_top_n(), sum(min(rpn.pre_nms_top_n(), n) for n in self.level_sizes))
        )

    @property
    def num_anchors(self) -> int:
        """A of the common layout: Mask R-CNN's candidates are its P proposals (per class)."""
        return self.num_proposals

    @property
    def default_settings(self) -> PostprocessSettings:
        heads = self.model.roi_heads
        return PostprocessSettings(
            score_threshold=float(heads.score_thresh),
            iou_threshold=float(heads.nms_thresh),
            topk_per_class=self.num_proposals,
            max_detections=int(heads.detections_per_img),
        )

    @property
    def mask_size(self) -> tuple[int, int] | None:
        side = 2 * int(self.model.roi_heads.mask_roi_pool.output_size[0])
        return side, side

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "proposals": self.num_proposals,
            "mask_size": list(self.mask_size or ()),
        }

    # ------------------------------------------------------------------ graph parts
    def check_settings(self, settings: PostprocessSettings) -> None:
        if settings.topk_per_class < self.num_proposals or settings.pre_nms_topk is not None:
            raise ValueError(
                f"Mask R-CNN keeps every one of its {self.num_proposals} proposals per class before NMS "
                f"(torchvision has no per-class top-k): topk_per_class must be >= {self.num_proposals}, "
                f"got {settings.topk_per_class}"
            )

    def decoder(self) -> nn.Module:
        return MaskRCNNDecoder(self.model, self.anchors, self.level_sizes, self.scales, self.image_size)

    def mask_head(self) -> nn.Module | None:
        return MaskRCNNMaskHead(self.model, self.scales, self.image_size)

    # ------------------------------------------------------------------ eager reference
    def resize(self, image: np.ndarray) -> np.ndarray:
        size = self.image_size
        return letterbox_resize(image, size, size, self.pad_value)[0]

    def normalize(self, images: np.ndarray) -> Tensor:
        return normalize(torch.from_numpy(np.ascontiguousarray(images)))

    @torch.no_grad()
    def eager_detections(self, raw: tuple[Tensor, ...], settings: PostprocessSettings) -> list[Detections]:
        """torchvision's RPN proposal filtering and RoI heads (box + mask) on the raw outputs."""
        self.check_settings(settings)
        model, size = self.model, self.image_size
        objectness, deltas, *levels = raw
        features = OrderedDict(zip(FEATURE_NAMES, levels, strict=True))
        batch = int(objectness.shape[0])
        sizes = [(size, size)] * batch
        proposals = model.rpn.box_coder.decode(deltas.reshape(-1, 4), [self.anchors] * batch)
        boxes, _ = model.rpn.filter_proposals(
            proposals.view(batch, -1, 4), objectness.reshape(-1, 1), sizes, self.level_sizes
        )
        heads = model.roi_heads
        saved = (heads.score_thresh, heads.nms_thresh, heads.detections_per_img)
        heads.score_thresh, heads.nms_thresh = settings.score_threshold, settings.iou_threshold
        heads.detections_per_img = settings.max_detections
        try:
            results, _ = heads(features, boxes, sizes)
        finally:
            heads.score_thresh, heads.nms_thresh, heads.detections_per_img = saved
        return [
            Detections(
                (r["boxes"] / float(size)).numpy(),
                r["scores"].numpy(),
                r["labels"].numpy() - 1,  # label 1..C -> class index 0..C-1
                r["masks"][:, 0].numpy(),
            )
            for r in results
        ]


class MaskRCNNV2Wrapper(MaskRCNNWrapper):
    architecture = "maskrcnn_resnet50_fpn_v2"

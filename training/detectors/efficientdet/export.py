"""EfficientDet-D0 export wrapper: the five levels' class and box maps -> box codes and class logits.

Graph: letterboxed uint8 image -> normalization -> network (outputs flattened to ``class_p3..class_p7``,
``box_p3..box_p7``) -> decoder (class logits, box codes) -> the shared post-processing with a global
pre-NMS top-k (``pre_nms_topk``, default 3000 < TensorRT's TopK limit of 3840; effdet uses 5000) over the
logits, whose candidates' sigmoid gives the scores and whose codes the decoder turns into boxes (anchors
in the graph as a constant, training's box decoding), class-aware NMS at IoU 0.5, 100 detections.

The eager reference is training's EfficientDet post-processing (``training.detectors.efficientdet
.postprocess``: effdet's top-k selection, the same decoding, class-aware NMS) with the export's
settings; with top-k 5000 and no score threshold that is effdet's ``DetBenchPredict`` (docs/results.md
gives the effect of the lower top-k).

Inputs are letterboxed (``resize="letterbox"``, pad = the ImageNet mean as uint8), the geometry of
``training.data.letterbox`` that the service repeats, so boxes map back to the original image for any
aspect ratio.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar, Literal, cast

import numpy as np
import torch
from torch import Tensor, nn

from training.checkpoint import Checkpoint
from training.data.letterbox import letterbox_resize
from training.detectors.efficientdet.transforms import EFFICIENTDET_PAD_VALUE
from training.detectors.export import ExportWrapper
from training.detectors.ssd300.transforms import normalize_to_tensor
from training.postprocess import Detections, PostprocessSettings

LEVELS = ("p3", "p4", "p5", "p6", "p7")
DEFAULT_PRE_NMS_TOPK = 3000
DEFAULT_SCORE_THRESHOLD = 0.05


class FlatOutputs(nn.Module):
    """The model with its two per-level output lists flattened to one tuple (classes, then boxes)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        class_outputs, box_outputs = self.model(images)
        return (*class_outputs, *box_outputs)


def _combine_by_adds(self: Any, x: list[Tensor]) -> Tensor:  # self: effdet's FpnCombine (untyped)
    """effdet's ``FpnCombine.forward`` with the weighted sum written as adds instead of ``stack`` + ``sum``
    over a new last axis: the same terms in the same order. OpenVINO runs that innermost-axis concatenation
    with a reference kernel, ~15% of EfficientDet-D0's INT8 time at 256 (docs/cpu-inference.md)."""
    resamples = zip(self.inputs_offsets, self.resample.values(), strict=True)
    nodes = [resample(x[offset]) for offset, resample in resamples]
    dtype = nodes[0].dtype
    if self.weight_method == "attn":
        weights = torch.softmax(self.edge_weights.to(dtype=dtype), dim=0)
        terms = [node * weights[i] for i, node in enumerate(nodes)]
    elif self.weight_method == "fastattn":
        edge_weights = nn.functional.relu(self.edge_weights.to(dtype=dtype))
        total = torch.sum(edge_weights) + 0.0001
        terms = [(node * edge_weights[i]) / total for i, node in enumerate(nodes)]
    elif self.weight_method == "sum":
        terms = nodes
    else:
        raise ValueError(f"unknown weight_method {self.weight_method}")
    out = terms[0]
    for term in terms[1:]:
        out = out + term
    return cast("Tensor", out)


def fuse_by_adds(model: nn.Module) -> nn.Module:
    """Every BiFPN fusion of ``model`` computed by :func:`_combine_by_adds` (in place; returns ``model``)."""
    from training.detectors.efficientdet.effdet_compat import FpnCombine

    for module in model.modules():
        if isinstance(module, FpnCombine):
            module.forward = types.MethodType(_combine_by_adds, module)
    return model


class EfficientDetDecoder(nn.Module):
    """Ten raw maps -> box ``codes [B, A, 4]`` and class logits ``[B, C, A]``; :meth:`decode_candidates`
    turns the codes of the post-processing's candidates into boxes x1y1x2y2 normalized to the input.

    Decoding only the candidates (3,000 of 12,276 anchors at 256 px) gives the same boxes: the decoding
    is per anchor. It took the decoder's reference-kernel Concat/Split and its Exp off OpenVINO's profile
    (docs/cpu-inference.md).
    """

    anchors: Tensor
    # Class logits, not sigmoid scores: the post-processing takes the sigmoid of its TopK's candidates only.
    scores_are_logits = True

    def __init__(self, anchors_cxcywh: Tensor, num_classes: int, image_size: int) -> None:
        super().__init__()
        self.register_buffer("anchors", anchors_cxcywh, persistent=False)  # (A, 4)
        self.num_classes = num_classes
        self.image_size = image_size

    def forward(self, *raw: Tensor) -> tuple[Tensor, Tensor]:
        from training.detectors.efficientdet.postprocess import flatten_outputs

        levels = len(raw) // 2
        logits, codes = flatten_outputs(list(raw[:levels]), list(raw[levels:]), self.num_classes)
        return codes, logits.transpose(1, 2)  # (B, A, C) -> (B, C, A)

    def decode_candidates(self, codes: Tensor, anchor_index: Tensor) -> Tensor:
        """``codes [B, N, 4]`` of the anchors ``anchor_index [B, N]`` -> boxes ``[B, N, 4]`` normalized."""
        from training.detectors.efficientdet.postprocess import decode_effdet_boxes

        anchors = self.anchors[anchor_index]  # (B, N, 4)
        return decode_effdet_boxes(codes, anchors, self.image_size) / float(self.image_size)


class EfficientDetWrapper(ExportWrapper):
    architecture = "efficientdet-d0"
    raw_output_names: ClassVar[tuple[str, ...]] = (
        *(f"class_{level}" for level in LEVELS),
        *(f"box_{level}" for level in LEVELS),
    )
    resize_mode: ClassVar[Literal["stretch", "letterbox"]] = "letterbox"
    pad_value: ClassVar[tuple[int, int, int]] = EFFICIENTDET_PAD_VALUE  # the ImageNet mean as uint8
    # Depthwise convolutions, SiLU and BiFPN's weighted fusions leave ONNX Runtime's FP32 scores up to
    # ~3e-5 from PyTorch's (measured on the test checkpoint; raw outputs agree to ~1e-5 relative).
    tolerance_floors: ClassVar[dict[str, float]] = {"score": 1e-4}
    # INT8: BiFPN's fast normalized fusion (relu(w) / (sum relu(w) + eps), then the weighted sum of the
    # resampled inputs: the ops directly in each node's ``combine`` module) stays fp32. The weights are
    # scalars in (0, 1) that sum to one; quantizing the sum's inputs each with its own scale would skew the
    # mix. The resampling convolutions inside ``combine/resample`` are quantized like any other.
    # The class net stays fp32 too: on the synthetic CPU preset's checkpoint (epoch 16, AP 0.3353) the
    # whole graph in INT8 lost 0.021 AP; keeping the class net lost 0.0039, while keeping the box net,
    # the BiFPN or the backbone instead left the loss at 0.021-0.023 (docs/quantization.md).
    int8_ignored_patterns: ClassVar[tuple[str, ...]] = (r"^.*/fpn/.*/combine/[^/]+$", r"^.*/class_net/")

    def __init__(self, checkpoint: Checkpoint, network: nn.Module) -> None:
        from training.detectors.efficientdet.model import EfficientDetD0, anchor_boxes
        from training.detectors.efficientdet.postprocess import anchors_xywh

        super().__init__(checkpoint, network)
        model = self.network
        if not isinstance(model, EfficientDetD0):
            raise TypeError(f"efficientdet-d0 checkpoint built a {type(model).__name__}, not EfficientDetD0")
        self.image_size = model.image_size
        self.anchors_yxyx = anchor_boxes(model)
        self.anchors_cxcywh = anchors_xywh(self.anchors_yxyx)
        self.network = FlatOutputs(fuse_by_adds(model)).eval()

    @property
    def default_settings(self) -> PostprocessSettings:
        return PostprocessSettings(
            score_threshold=DEFAULT_SCORE_THRESHOLD,
            iou_threshold=0.5,
            max_detections=100,
            pre_nms_topk=DEFAULT_PRE_NMS_TOPK,
        )

    @property
    def num_anchors(self) -> int:
        return int(self.anchors_cxcywh.shape[0])

    def decoder(self) -> nn.Module:
        return EfficientDetDecoder(self.anchors_cxcywh, self.num_classes, self.image_size)

    def resize(self, image: np.ndarray) -> np.ndarray:
        return letterbox_resize(image, self.image_size, self.image_size, self.pad_value)[0]

    def normalize(self, images: np.ndarray) -> Tensor:
        return torch.stack([normalize_to_tensor(image) for image in images])

    def eager_detections(self, raw: tuple[Tensor, ...], settings: PostprocessSettings) -> list[Detections]:
        from training.detectors.efficientdet.postprocess import PostprocessConfig, detections

        levels = len(raw) // 2
        cfg = PostprocessConfig(
            max_detection_points=settings.pre_nms_topk or DEFAULT_PRE_NMS_TOPK,
            iou_threshold=settings.iou_threshold,
            max_detections=settings.max_detections,
            score_threshold=settings.score_threshold,
        )
        results = detections(
            list(raw[:levels]), list(raw[levels:]), self.anchors_yxyx, self.num_classes, self.image_size, cfg
        )
        size = float(self.image_size)
        return [
            # contiguous label 1..C -> label index 0..C-1; boxes normalized to the input, as the graph's
            Detections((r["boxes"] / size).numpy(), r["scores"].numpy(), r["labels"].numpy() - 1)
            for r in results
        ]

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "image_size": self.image_size}

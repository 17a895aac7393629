"""The graph around a source network: uint8 NHWC in front, the head's decoding and NMS behind.

Both ends are small torch modules exported with the project's exporter (``exporters.onnx.export``) and joined
to the source graph with ``onnx.compose``; the source network's nodes and weights pass through unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from torch import Tensor, nn

from exporters.importing.source import OPSET, SourceModel
from exporters.importing.spec import AnchorHead, BoxFormat, DecodedHead, DetectionsHead, ImportSpec
from exporters.onnx.export import torch_to_onnx
from exporters.onnx.postprocess_graph import DetectionPostprocess, PostprocessSettings

IMAGES = "images"
# The source network's names inside the artifact: ``src/<its own name>``.
SOURCE_PREFIX = "src/"
CONTRACT = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"]


class Normalize(nn.Module):
    """uint8 [B, H, W, 3] -> float32 ``(x - mean) / std`` in the source's layout."""

    mean: Tensor
    inv_std: Tensor

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], nchw: bool) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("inv_std", 1.0 / torch.tensor(std, dtype=torch.float32))
        self.nchw = nchw

    def forward(self, images: Tensor) -> Tensor:
        x = (images.float() - self.mean) * self.inv_std
        return x.permute(0, 3, 1, 2) if self.nchw else x


def class_scores(scores: Tensor, kind: str, background: int | None) -> Tensor:
    """[B, A, C(+1)] raw -> [B, C, A] probabilities without the background class."""
    if kind == "sigmoid":
        scores = scores.sigmoid()
    elif kind == "softmax":
        scores = scores.softmax(dim=2)
    if background is not None:
        keep = [c for c in range(scores.shape[2]) if c != background]
        scores = scores[:, :, keep]
    return scores.transpose(1, 2)


def to_xyxy(boxes: Tensor, box_format: BoxFormat, scale: Tensor) -> Tensor:
    """[..., 4] in ``box_format`` -> x1, y1, x2, y2, each divided by ``scale`` (w, h, w, h)."""
    a, b, c, d = boxes.unbind(-1)
    if box_format == "yxyx":
        a, b, c, d = b, a, d, c
    elif box_format == "cxcywh":
        a, b, c, d = a - c / 2, b - d / 2, a + c / 2, b + d / 2
    return torch.stack([a, b, c, d], dim=-1) / scale


class AnchorDecode(nn.Module):
    """Box codes and anchors -> boxes, as TF's ``faster_rcnn_box_coder`` and MediaPipe decode them."""

    anchors: Tensor

    def __init__(self, head: AnchorHead, anchors: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("anchors", torch.from_numpy(anchors))  # cy, cx, h, w
        self.yx_first = head.box_order == "yxhw"
        self.scales = head.box_scales

    def forward(self, codes: Tensor, anchor_index: Tensor) -> Tensor:
        anchors = self.anchors[anchor_index]  # [B, N, 4]
        t0, t1, t2, t3 = codes.unbind(-1)
        ty, tx, th, tw = (t0, t1, t2, t3) if self.yx_first else (t1, t0, t3, t2)
        sy, sx, sh, sw = (
            self.scales if self.yx_first else (self.scales[1], self.scales[0], *self.scales[2:][::-1])
        )
        cy = ty / sy * anchors[..., 2] + anchors[..., 0]
        cx = tx / sx * anchors[..., 3] + anchors[..., 1]
        h = torch.exp(th / sh) * anchors[..., 2]
        w = torch.exp(tw / sw) * anchors[..., 3]
        return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)


class AnchorHeadPost(nn.Module):
    def __init__(self, head: AnchorHead, anchors: np.ndarray, settings: PostprocessSettings, classes: int):
        super().__init__()
        self.head = head
        self.decode = AnchorDecode(head, anchors)
        self.post = DetectionPostprocess(settings, classes, len(anchors))

    def forward(self, codes: Tensor, scores: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        probabilities = class_scores(scores, self.head.score, self.head.background_class)
        return self.post(codes, probabilities, decode=self.decode)  # type: ignore[no-any-return]


class DecodedHeadPost(nn.Module):
    scale: Tensor

    def __init__(
        self,
        head: DecodedHead,
        size: tuple[int, int],
        settings: PostprocessSettings,
        classes: int,
        anchors: int,
    ):
        super().__init__()
        self.head = head
        w, h = (size[1], size[0]) if not head.normalized else (1, 1)
        self.register_buffer("scale", torch.tensor([w, h, w, h], dtype=torch.float32))
        self.post = DetectionPostprocess(settings, classes, anchors)

    def forward(self, boxes: Tensor, scores: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        xyxy = to_xyxy(boxes, self.head.box_format, self.scale)
        return self.post(xyxy, class_scores(scores, self.head.score, self.head.background_class))  # type: ignore[no-any-return]


class DetectionsHeadPost(nn.Module):
    """Detections after the source's own NMS -> the contract: thresholded, sorted, padded to K rows."""

    scale: Tensor

    def __init__(self, head: DetectionsHead, size: tuple[int, int], settings: PostprocessSettings, rows: int):
        super().__init__()
        self.head = head
        w, h = (size[1], size[0]) if not head.normalized else (1, 1)
        self.register_buffer("scale", torch.tensor([w, h, w, h], dtype=torch.float32))
        self.threshold = settings.score_threshold
        self.k = min(settings.max_detections, rows)
        self.pad = settings.max_detections - self.k

    def forward(
        self, boxes: Tensor, scores: Tensor, classes: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        masked = torch.where(scores > self.threshold, scores, torch.full_like(scores, -1.0))
        top, index = masked.topk(self.k, dim=1)
        valid = top >= 0.0
        xyxy = to_xyxy(boxes, self.head.box_format, self.scale).gather(
            1, index.unsqueeze(2).expand(-1, -1, 4)
        )
        cls = (classes.gather(1, index).round().to(torch.int64) - self.head.class_offset).clamp(min=0)
        top = torch.where(valid, top, torch.zeros_like(top))
        xyxy = torch.where(valid.unsqueeze(2), xyxy, torch.zeros_like(xyxy))
        cls = torch.where(valid, cls, torch.zeros_like(cls))
        if self.pad:
            top = torch.cat([top, top.new_zeros(top.shape[0], self.pad)], dim=1)
            xyxy = torch.cat([xyxy, xyxy.new_zeros(xyxy.shape[0], self.pad, 4)], dim=1)
            cls = torch.cat([cls, cls.new_zeros(cls.shape[0], self.pad)], dim=1)
        return valid.sum(dim=1, keepdim=True).to(torch.int32), xyxy, top, cls.to(torch.int32)


def post_module(
    spec: ImportSpec, shapes: dict[str, list[int]], anchors: np.ndarray | None, classes: int
) -> nn.Module:
    head, p = spec.head, spec.postprocess
    settings = PostprocessSettings(
        score_threshold=p.score_threshold,
        iou_threshold=p.iou_threshold,
        topk_per_class=min(p.topk_per_class, shapes[head.boxes][1]),
        max_detections=p.max_detections,
    )
    size = (spec.input.height, spec.input.width)
    if isinstance(head, AnchorHead):
        assert anchors is not None
        return AnchorHeadPost(head, anchors, settings, classes)
    if isinstance(head, DecodedHead):
        return DecodedHeadPost(head, size, settings, classes, shapes[head.boxes][1])
    return DetectionsHeadPost(head, size, settings, shapes[head.boxes][1])


def head_inputs(spec: ImportSpec) -> list[str]:
    head = spec.head
    return (
        [head.boxes, head.scores, head.classes]
        if isinstance(head, DetectionsHead)
        else [head.boxes, head.scores]
    )


def build_graph(
    spec: ImportSpec, source: SourceModel, post: nn.Module, shapes: dict[str, list[int]]
) -> onnx.ModelProto:
    """Normalize -> source network -> ``post``: one ONNX graph with the contract's input and outputs."""
    pre = Normalize(spec.input.mean, spec.input.std, source.input_layout == "NCHW")
    example = torch.zeros(2, spec.input.height, spec.input.width, 3, dtype=torch.uint8)
    pre_graph = _prefixed(torch_to_onnx(pre, (example,), [IMAGES], ["normalized"], OPSET), "pre/", {IMAGES})
    inputs = head_inputs(spec)
    examples = tuple(torch.zeros(2, *shapes[name][1:]) for name in inputs)
    post_names = [f"in{i}" for i in range(len(inputs))]
    post_graph = _prefixed(torch_to_onnx(post, examples, post_names, CONTRACT, OPSET), "post/", set(CONTRACT))
    src = onnx.compose.add_prefix(source.onnx_model, SOURCE_PREFIX)  # a copy; its names cannot clash
    ir = max(pre_graph.ir_version, src.ir_version, post_graph.ir_version)
    for m in (pre_graph, src, post_graph):
        m.ir_version = ir
    io_map = [("pre/normalized", SOURCE_PREFIX + source.input_name)]
    joined = onnx.compose.merge_models(pre_graph, src, io_map=io_map)
    io_map = [(SOURCE_PREFIX + name, f"post/{post_names[i]}") for i, name in enumerate(inputs)]
    joined = onnx.compose.merge_models(joined, post_graph, io_map=io_map)
    del joined.graph.output[:]
    joined.graph.output.extend(post_graph.graph.output)
    return joined


def _prefixed(model: onnx.ModelProto, prefix: str, keep: set[str]) -> onnx.ModelProto:
    """Every name in ``model`` prefixed (so merged graphs cannot clash), except the names in ``keep``."""
    model = onnx.compose.add_prefix(model, prefix)
    renamed = {prefix + name: name for name in keep}
    for node in model.graph.node:
        node.input[:] = [renamed.get(n, n) for n in node.input]
        node.output[:] = [renamed.get(n, n) for n in node.output]
    for value in [*model.graph.input, *model.graph.output]:
        value.name = renamed.get(value.name, value.name)
    return model

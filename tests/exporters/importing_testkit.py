"""Source models "trained elsewhere" for the import tests: small torch networks exported to ONNX with
fixed random weights, one per head type, their import specs, and sample images."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from PIL import Image
from torch import Tensor, nn

from exporters.onnx.export import torch_to_onnx

SIZE = 32
GRID = 4  # anchors on a 4x4 grid, 2 shapes each
ANCHORS = GRID * GRID * 2
CLASSES = 3  # plus a background column where the head has one


class _Backbone(nn.Module):
    def __init__(self, nchw: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.nchw = nchw
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=4, padding=1)
        )

    def features(self, x: Tensor) -> Tensor:
        if not self.nchw:
            x = x.permute(0, 3, 1, 2)
        return self.body(x).flatten(2).transpose(1, 2)  # [B, 16, 8]


class AnchorSource(_Backbone):
    """Box codes [B, A, 4] and logits [B, A, 1 + C] (background first), as TF/MediaPipe SSDs give them."""

    def __init__(self, nchw: bool = True) -> None:
        super().__init__(nchw)
        self.boxes = nn.Linear(8, 2 * 4)
        self.scores = nn.Linear(8, 2 * (CLASSES + 1))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        f = self.features(x)
        return self.boxes(f).reshape(-1, ANCHORS, 4), self.scores(f).reshape(-1, ANCHORS, CLASSES + 1)


class DecodedSource(_Backbone):
    """Boxes [B, A, 4] as cx, cy, w, h in input pixels and softmax scores [B, A, C]."""

    def __init__(self) -> None:
        super().__init__(nchw=False)
        self.boxes = nn.Linear(8, 2 * 4)
        self.scores = nn.Linear(8, 2 * CLASSES)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        f = self.features(x)
        raw = self.boxes(f).reshape(-1, ANCHORS, 4).sigmoid()
        cxcy, wh = raw[..., :2] * SIZE, raw[..., 2:] * SIZE / 2
        return torch.cat([cxcy, wh], dim=-1), self.scores(f).reshape(-1, ANCHORS, CLASSES).softmax(-1)


class DetectionsSource(_Backbone):
    """NMS already done: boxes [B, 10, 4] (y1, x1, y2, x2 normalized), scores [B, 10], classes [B, 10]
    as floats counting from 1 (TF Object Detection API's layout)."""

    def __init__(self) -> None:
        super().__init__(nchw=False)
        self.head = nn.Linear(8 * 16, 10 * 6)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out = self.head(self.features(x).flatten(1)).reshape(-1, 10, 6)
        corner = out[..., :2].sigmoid() * 0.5
        boxes = torch.cat([corner, corner + 0.1 + out[..., 2:4].sigmoid() * 0.4], dim=-1)
        scores, order = out[..., 4].sigmoid().sort(dim=1, descending=True)
        classes = 1.0 + torch.remainder(torch.arange(10).float() * 7, CLASSES).expand(out.shape[0], -1)
        return boxes.gather(1, order.unsqueeze(2).expand(-1, -1, 4)), scores, classes.gather(1, order)


OUTPUTS = {
    "anchors": ["box_encodings", "class_predictions"],
    "decoded": ["boxes", "scores"],
    "detections": ["detection_boxes", "detection_scores", "detection_classes"],
}


def export_source(module: nn.Module, path: Path, kind: str, nchw: bool = False) -> Path:
    example = torch.rand(1, 3, SIZE, SIZE) if nchw else torch.rand(1, SIZE, SIZE, 3)
    onnx.save(torch_to_onnx(module.eval(), (example,), ["input"], OUTPUTS[kind], opset=13), path)
    return path


def anchors_file(path: Path) -> Path:
    centers = (np.arange(GRID) + 0.5) / GRID
    rows = [(cy, cx, h, w) for cy in centers for cx in centers for h, w in ((0.3, 0.3), (0.4, 0.2))]
    np.save(path, np.asarray(rows, dtype=np.float32))
    return path


def spec(kind: str, labels: list[str] | None = None, **head: Any) -> dict[str, Any]:
    a, d, n = OUTPUTS["anchors"], OUTPUTS["decoded"], OUTPUTS["detections"]
    heads: dict[str, dict[str, Any]] = {
        "anchors": {
            "type": "anchors",
            "boxes": a[0],
            "scores": a[1],
            "anchors": {"generator": "file", "path": "anchors.npy"},
        },
        "decoded": {
            "type": "decoded",
            "boxes": d[0],
            "scores": d[1],
            "box_format": "cxcywh",
            "normalized": False,
        },
        "detections": {
            "type": "detections",
            "boxes": n[0],
            "scores": n[1],
            "classes": n[2],
            "box_format": "yxyx",
            "class_offset": 1,
        },
    }
    background = ["background"] if kind == "anchors" else []
    return {
        "name": f"toy-{kind}",
        "architecture": f"toy-{kind}",
        "input": {"height": SIZE, "width": SIZE, "mean": [127.5, 127.5, 127.5], "std": [127.5, 127.5, 127.5]},
        "labels": labels if labels is not None else [*background, "red", "green", "blue"],
        "head": heads[kind] | head,
        "postprocess": {"score_threshold": 0.2, "iou_threshold": 0.5, "max_detections": 20},
    }


def write_spec(folder: Path, fields: dict[str, Any]) -> Path:
    path = folder / "import.json"
    path.write_text(json.dumps(fields))
    return path


def sample_images(folder: Path, count: int = 3) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"sample{i}.png"
        Image.fromarray(rng.integers(0, 256, (40 + 8 * i, 48, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths

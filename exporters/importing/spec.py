"""What ``detect-export import`` needs to know about a source model: one JSON file (an import spec).

    {
      "name": "ssd-mobilenetv2-oidv4", "architecture": "ssd-mobilenetv2",
      "input": {"height": 300, "width": 300, "mean": [127.5, 127.5, 127.5], "std": [127.5, 127.5, 127.5]},
      "labels": "labelmap.txt",
      "head": {"type": "anchors", "boxes": "raw_outputs/box_encodings",
               "scores": "raw_outputs/class_predictions", "box_order": "yxhw",
               "box_scales": [10, 10, 5, 5], "score": "sigmoid", "background_class": 0,
               "anchors": {"generator": "mediapipe_ssd", ...}},
      "postprocess": {"score_threshold": 0.3, "iou_threshold": 0.5, "max_detections": 100}
    }

Head types:

- ``anchors``: an SSD-style head. ``boxes`` [B, A, 4] are box codes relative to A anchors (``box_order``:
  which code is which, ``box_scales``: the coder's divisors, as TF Object Detection API's
  ``faster_rcnn_box_coder`` and MediaPipe's ``TensorsToDetectionsCalculator``); ``scores`` [B, A, C].
- ``decoded``: boxes are already decoded ([B, A, 4] in ``box_format``, normalized or in input pixels),
  scores [B, A, C]: the import adds only the NMS.
- ``detections``: NMS is already inside: ``boxes`` [B, K, 4], ``scores`` [B, K], ``classes`` [B, K] (and
  padding rows with score 0); the import maps them onto the contract (box format, order, padding).

Paths in the spec (labels, an anchor file) are relative to the spec file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from exporters.errors import ExportError
from exporters.importing.anchors import AnchorFile, MediaPipeSsdAnchors


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputNormalization(_Strict):
    """The source's input: ``(pixel - mean) / std`` per channel, pixels 0..255 in ``color_order``."""

    height: int = Field(gt=0)
    width: int = Field(gt=0)
    color_order: Literal["RGB", "BGR"] = "RGB"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)


BoxFormat = Literal["xyxy", "yxyx", "cxcywh"]


class AnchorHead(_Strict):
    type: Literal["anchors"]
    boxes: str
    scores: str
    box_order: Literal["yxhw", "xywh"] = "yxhw"
    box_scales: tuple[float, float, float, float] = (10.0, 10.0, 5.0, 5.0)
    score: Literal["sigmoid", "softmax", "none"] = "sigmoid"
    background_class: int | None = 0
    anchors: Annotated[MediaPipeSsdAnchors | AnchorFile, Field(discriminator="generator")]


class DecodedHead(_Strict):
    type: Literal["decoded"]
    boxes: str
    scores: str
    box_format: BoxFormat = "xyxy"
    normalized: bool = True
    score: Literal["sigmoid", "softmax", "none"] = "none"
    background_class: int | None = None


class DetectionsHead(_Strict):
    type: Literal["detections"]
    boxes: str
    scores: str
    classes: str
    box_format: BoxFormat = "xyxy"
    normalized: bool = True
    class_offset: int = 0  # subtracted from the source's class ids (e.g. 1 where 0 is background)


class Postprocess(_Strict):
    score_threshold: float = Field(default=0.3, ge=0.0, lt=1.0)
    iou_threshold: float = Field(default=0.5, gt=0.0, le=1.0)
    max_detections: int = Field(default=100, gt=0)
    topk_per_class: int = Field(default=100, gt=0)


class ImportSpec(_Strict):
    name: str
    architecture: str
    backbone: str | None = None
    input: InputNormalization
    labels: Path | tuple[str, ...]
    head: Annotated[AnchorHead | DecodedHead | DetectionsHead, Field(discriminator="type")]
    postprocess: Postprocess = Postprocess()
    display_score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    source: dict[str, str] = Field(default_factory=dict)  # origin, licence, sha256: copied to the manifest


def read_spec(path: Path) -> ImportSpec:
    """The spec in ``path``; a clear error naming the field that is wrong."""
    try:
        return ImportSpec.model_validate(json.loads(path.read_text()))
    except FileNotFoundError as exc:
        raise ExportError(f"import spec {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise ExportError(f"import spec {path} is not JSON: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ExportError(f"import spec {path}: {problems}") from exc


def read_labels(spec: ImportSpec, base: Path, background_class: int | None) -> list[str]:
    """Class names in score order with the background class removed (a label file: one name per line)."""
    if isinstance(spec.labels, Path):
        path = spec.labels if spec.labels.is_absolute() else base / spec.labels
        try:
            names = [line.strip() for line in path.read_text().splitlines()]
        except OSError as exc:
            raise ExportError(f"labels: cannot read {path}: {exc}") from exc
        while names and not names[-1]:
            names.pop()
    else:
        names = list(spec.labels)
    if background_class is not None:
        if not 0 <= background_class < len(names):
            raise ExportError(
                f"head.background_class {background_class} is not a row of the {len(names)} labels"
            )
        del names[background_class]
    if any(not n for n in names):
        raise ExportError("labels: empty class name")
    return names

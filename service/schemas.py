"""Response bodies (pydantic models; they also document the API at /docs)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.manifest import Accuracy, InputSpec, Label, Parent


class DetectQuery(BaseModel):
    """Query parameters of POST /detect. Unknown parameters are rejected (a typo must not be ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="model name; default: the server's default model")
    version: str | None = Field(default=None, description="model version; default: the latest loaded one")
    score_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="minimum score; default: the model's manifest value"
    )
    max_detections: int | None = Field(default=None, gt=0, description="at most this many per image")
    classes: str | None = Field(default=None, description="comma-separated class names or ids to keep")
    format: Literal["json", "jpeg", "png"] | None = Field(
        default=None,
        description="json, or the image with boxes drawn (one image only); default: from Accept, else json",
    )
    mask_format: Literal["rle", "polygon"] = Field(
        default="rle",
        description="mask models, JSON: each detection's mask as COCO RLE (`mask`, exact) or as COCO "
        "polygons (`polygons`, outer outlines)",
    )


class Box(BaseModel):
    """Corners in original-image pixels (after EXIF orientation), clipped to the image."""

    x1: float
    y1: float
    x2: float
    y2: float


class RLEMask(BaseModel):
    """COCO compressed run-length encoding (column-major), as ``pycocotools.mask.decode`` reads it."""

    size: list[int] = Field(description="[height, width] of the original image")
    counts: str


class Detection(BaseModel):
    class_id: int = Field(description="index into the model's labels")
    label: str
    score: float
    box: Box
    mask: RLEMask | None = Field(default=None, description="mask models: the instance mask (mask_format=rle)")
    polygons: list[list[float]] | None = Field(
        default=None,
        description="mask models with mask_format=polygon: COCO polygons [[x0, y0, x1, y1, ...], ...] in "
        "original-image pixels (vertices on pixel corners; holes are not represented)",
    )


class DetectionResult(BaseModel):
    """Detections for one image."""

    model: str
    version: str
    filename: str | None = Field(default=None, description="the multipart file name, when one was sent")
    width: int = Field(description="original image width in pixels (after EXIF orientation)")
    height: int
    detections: list[Detection]


class DetectionResults(BaseModel):
    """Detections for several images, in the order they were sent."""

    results: list[DetectionResult]


class BatchingInfo(BaseModel):
    max_batch_size: int
    max_queue_delay_ms: float
    max_queue_size: int


class ModelInfo(BaseModel):
    """One loaded model version, from its manifest plus how this server runs it."""

    name: str
    version: str
    ready: bool
    architecture: str
    backbone: str | None
    format: str
    precision: str
    backend: str | None = Field(description="the runtime executing it, once loaded")
    input: InputSpec
    labels: list[Label]
    has_masks: bool
    score_threshold: float
    iou_threshold: float
    max_detections: int
    artifact_max_batch_size: int
    dynamic_batch: bool
    batching: BatchingInfo
    metrics: dict[str, object]
    parent: Parent | None = Field(default=None, description="the fp32 artifact a variant was derived from")
    accuracy: Accuracy | None = Field(default=None, description="measured COCO AP (and change vs parent)")


class ModelList(BaseModel):
    default_model: str | None
    models: list[ModelInfo]


class HealthStatus(BaseModel):
    status: str = Field(description="ok | loading | draining | failed")
    detail: dict[str, str] = Field(default_factory=dict, description="per-model state when not ok")


class ErrorBody(BaseModel):
    error: str = Field(description="what was wrong")
    field: str | None = Field(
        default=None, description="the offending input, e.g. images[1] or score_threshold"
    )

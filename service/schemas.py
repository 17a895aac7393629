"""Response bodies (pydantic models; they also document the API at /docs)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.manifest import Accuracy, InputSpec, Label, Parent


class DetectQuery(BaseModel):
    """Query parameters of POST /detect. Unknown parameters are rejected (a typo must not be ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None,
        description="model name; default: the server's default model (`default_model` in /v1/models; a "
        "server with several models and none declared answers 400 without this)",
    )
    version: str | None = Field(default=None, description="model version; default: the latest loaded one")
    score_threshold: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="minimum score; default: the model's display_score_threshold (readable results), else "
        "its score_threshold (both in /v1/models); pass e.g. 0.05 to keep what COCO evaluation keeps",
    )
    max_detections: int | None = Field(default=None, gt=0, description="at most this many per image")
    # The pattern is documentation only: the route refuses a filter naming no class with a message saying
    # what to send (400), rather than pydantic's 422.
    classes: Annotated[str, Field(json_schema_extra={"pattern": r"[^\s,]"})] | None = Field(
        default=None,
        description="comma-separated classes to keep: names (case-insensitive) or integers. An integer is a "
        "category id (a label's coco_id, as in `category_id`) when the model declares category ids for "
        "all its labels, else an index into its labels (`class_id`). At least one class: a filter naming "
        "none (empty, or only commas) is refused with 400 (leave the parameter out to keep every class)",
    )
    format: Literal["json", "jpeg", "png", "mp4"] | None = Field(
        default=None,
        description="json, or the image with boxes drawn (one image only); default: from Accept, else json. "
        "A video answers NDJSON (json, the default) or, with mp4, the video with boxes and track ids drawn",
    )
    fps: float | None = Field(
        default=None,
        gt=0,
        description="video: process at most this many frames per second of video time (by timestamp), "
        "skipping the rest; default: every frame",
    )
    max_frames: int | None = Field(
        default=None, gt=0, description="video: process at most this many frames; default: video_max_frames"
    )
    track: bool = Field(default=True, description="video: give each detection a track_id (ByteTrack)")
    detect_every: int = Field(
        default=1,
        ge=1,
        le=100,
        description="video: run the detector on every K-th processed frame only; the frames in between get "
        "the tracks advanced by the tracker (source predicted, at most video_predict_max_frames in a row). "
        "Needs track. Default 1: every processed frame is detected",
    )
    detect_budget: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="video: run the detector on at most this many frames per second of video, evenly "
        "spaced among the processed frames (the first always); the others are predicted as with "
        "detect_every. Needs track; not with detect_every. Default: every processed frame (detect_every)",
    )
    tiling: Annotated[str, Field(json_schema_extra={"pattern": r"^(off|auto|\d+x\d+)$"})] | None = Field(
        default=None,
        description="tiled inference for large images: off, auto (tiles only an image more than "
        "tiling_auto_min_scale times the network input; tiles about the network's size) or a tile size "
        "WIDTHxHEIGHT (32..8192 px a side). Each tile counts as one image against max_images_per_request "
        "and the queue. Default: the model's tiling setting, else the server's (off)",
    )
    tile_overlap: float | None = Field(
        default=None,
        ge=0.0,
        le=0.75,
        description="overlap of neighbouring tiles, a fraction of the tile side; default: tiling_overlap",
    )
    tile_grid: bool = Field(
        default=False, description="boxed image of a tiled request: draw the tile grid (thin white frames)"
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
    category_id: int | None = Field(
        default=None,
        description="the dataset's category id (the label's coco_id); absent if the model has none",
    )
    label: str
    score: float
    box: Box
    mask: RLEMask | None = Field(default=None, description="mask models: the instance mask (mask_format=rle)")
    polygons: list[list[float]] | None = Field(
        default=None,
        description="mask models with mask_format=polygon: COCO polygons [[x0, y0, x1, y1, ...], ...] in "
        "original-image pixels (vertices on pixel corners; holes are not represented)",
    )


class TrackedDetection(Detection):
    track_id: int | None = Field(
        default=None,
        description="video: the object's track id, stable across frames (absent: not tracked, or not yet "
        "confirmed)",
    )


class VideoFrameResult(BaseModel):
    """One NDJSON line of a video answer: one processed frame."""

    frame: int = Field(description="index of the frame among all decoded frames (skipped ones count)")
    pts: float = Field(description="presentation time in seconds from the video's start")
    width: int
    height: int
    source: Literal["detected", "predicted"] = Field(
        default="detected",
        description="detected: the detector's boxes; predicted: the live tracks advanced to this frame",
    )
    frames_since_detection: int = Field(default=0, description="frames answered since the last detected one")
    detections: list[TrackedDetection]


class VideoSummary(BaseModel):
    """The last NDJSON line of a video answer."""

    summary: Literal[True] = True
    model: str
    version: str
    codec: str
    container: str
    fps: float | None = Field(description="the video's average frame rate, as its header says")
    claimed_frames: int | None = Field(description="frame count the header claims (not relied on)")
    claimed_duration_s: float | None = Field(description="duration the header claims (not relied on)")
    frames_read: int = Field(description="frames decoded")
    frames_processed: int = Field(description="frames answered (a line each)")
    frames_detected: int = Field(
        description="frames the detector ran on (detect_every: the others predicted)"
    )
    frames_skipped: int = Field(description="decoded frames not processed (fps)")
    tracks: int = Field(description="track ids given")
    stopped_by: str | None = Field(
        default=None,
        description="the limit that ended reading early: max_frames, max_read_frames or max_duration_s",
    )


class DetectionResult(BaseModel):
    """Detections for one image."""

    model: str
    version: str
    filename: str | None = Field(default=None, description="the multipart file name, when one was sent")
    width: int = Field(description="original image width in pixels (after EXIF orientation)")
    height: int
    detections: list[Detection]
    served_by: str | None = Field(
        default=None,
        description="name:version of the artifact that computed the detections when it is not the one asked "
        "for: the fp32 parent serving in the place of a variant that failed its self-check at load "
        "(`self_check` in /v1/models); absent otherwise",
    )
    tiles: list[Box] | None = Field(
        default=None,
        description="tiled requests only: the tiles the image was cut into, in original-image pixels (the "
        "whole image also ran when tiling_full_image is on)",
    )


class DetectionResults(BaseModel):
    """Detections for several images, in the order they were sent."""

    results: list[DetectionResult]


class BatchingInfo(BaseModel):
    max_batch_size: int
    max_queue_delay_ms: float
    max_queue_size: int


class SelfCheckInfo(BaseModel):
    """The self-check at load: the artifact's golden inputs run on this server, against the detections it
    gave where it was made (docs/operations.md, "Self-check at load")."""

    status: Literal["passed", "failed", "absent"] = Field(
        description="passed | failed | absent (the artifact carries no golden inputs: served unchecked)"
    )
    agreement: float | None = Field(
        description="share of the compared detections that agree (matched: same class, IoU and score "
        "within the manifest's tolerances); null when absent"
    )
    min_agreement: float | None = Field(description="the agreement the artifact needs to pass")
    agreeing: int | None = Field(default=None, description="detections that agree")
    missing: int | None = Field(
        default=None, description="expected detections, clearly above the threshold, not found"
    )
    unexpected: int | None = Field(
        default=None, description="detections found clearly above the threshold, not expected"
    )
    moved: int | None = Field(
        default=None, description="matched detections whose score or box moved past the tolerance"
    )
    max_score_error: float | None = Field(
        default=None, description="largest score difference of a matched pair"
    )
    min_iou: float | None = Field(default=None, description="smallest overlap of a matched pair")
    images: int = Field(description="golden inputs run")
    cpu_class: str | None = Field(
        description="the x86 CPU class this server runs as (avx2 | avx512_vnni | avx512_bf16 | amx, "
        "lowered by ONEDNN_MAX_CPU_ISA); null when unknown"
    )
    reference: str | None = Field(
        description="the runtime and CPU class that produced the expected detections"
    )
    policy: str = Field(description="the self_check_failure setting applied: warn | fallback | refuse")
    action: Literal["served", "served_anyway", "fell_back", "refused"] = Field(
        description="served (passed or absent), served_anyway (failed, warn), fell_back (failed: the fp32 "
        "parent answers in its place), refused (failed: not served)"
    )
    served_by: str | None = Field(
        description="name:version of the fp32 parent answering for this version (fell_back); else null"
    )
    detail: str = Field(description="the result in one sentence; for a failure, what was done and why")


class ModelInfo(BaseModel):
    """One loaded model version, from its manifest plus how this server runs it."""

    name: str
    version: str
    default: bool = Field(description="the model answering requests that name none")
    ready: bool
    architecture: str
    backbone: str | None
    format: str
    precision: str
    backend: str | None = Field(description="the runtime executing it, once loaded")
    inference_precision: str | None = Field(
        default=None,
        description="floating-point precision the runtime computes in (f32 | f16 | bf16; for an int8 "
        "artifact, that of its unquantized layers), read back from the runtime once loaded",
    )
    input: InputSpec
    labels: list[Label]
    has_masks: bool
    score_threshold: float
    display_score_threshold: float | None = Field(
        description="the score threshold requests without score_threshold use (null: score_threshold)"
    )
    iou_threshold: float
    max_detections: int
    artifact_max_batch_size: int
    dynamic_batch: bool
    batching: BatchingInfo
    metrics: dict[str, object]
    parent: Parent | None = Field(default=None, description="the fp32 artifact a variant was derived from")
    accuracy: Accuracy | None = Field(default=None, description="measured COCO AP (and change vs parent)")
    self_check: SelfCheckInfo | None = Field(
        default=None, description="the self-check at load; null until the version is checked"
    )


class ModelList(BaseModel):
    default_model: str | None = Field(
        description="answers requests that name no model: DETECT_DEFAULT_MODEL, else the repository's file "
        "'default', else its only model; null when several are served and none is declared"
    )
    models: list[ModelInfo]


class HealthStatus(BaseModel):
    status: str = Field(description="ok | loading | draining | failed")
    detail: dict[str, str] = Field(default_factory=dict, description="per-model state when not ok")


class ErrorBody(BaseModel):
    error: str = Field(description="what was wrong")
    field: str | None = Field(
        default=None, description="the offending input, e.g. images[1] or score_threshold"
    )


class CaptureSummary(BaseModel):
    """What sample capture keeps (GET /v1/captures)."""

    state: str = Field(description="off (capture_dir unset) | on | failed (the folder could not be written)")
    reason: str | None = Field(default=None, description="why capture is not on")
    images: int = Field(description="images kept")
    bytes: int = Field(description="bytes the capture folder holds")
    max_bytes: int = Field(description="the disk quota (capture_max_bytes)")
    by_reason: dict[str, int] = Field(description="images kept per capture reason")
    dropped: dict[str, int] = Field(description="images chosen but not written, per why, since start")
    queued: int = Field(description="images waiting to be written")

"""The artifact manifest: what an exported model says about itself.

`exporters` writes it next to `model.onnx` / `model.plan`; the service reads it and guesses nothing.
This module is the one place the schema lives (exporters import it; it imports neither torch nor training).

Output contract every exported detector obeys (TensorRT NMS-plugin layout), K = ``max_detections``:

==================  ===============  =======  ==================================================
output              shape            dtype    meaning
==================  ===============  =======  ==================================================
num_detections      [B, 1]           int32    valid rows per image
detection_boxes     [B, K, 4]        float32  x1, y1, x2, y2 normalized to the network input
detection_scores    [B, K]           float32  descending
detection_classes   [B, K]           int32    index into ``labels``
detection_masks     [B, K, Mh, Mw]   float32  (mask models only) low-resolution mask probabilities
==================  ===============  =======  ==================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.quality import QualityBaseline

MANIFEST_FILE = "manifest.json"
SCHEMA_VERSION = 1

OUTPUT_NAMES: tuple[str, ...] = (
    "num_detections",
    "detection_boxes",
    "detection_scores",
    "detection_classes",
)
MASK_OUTPUT = "detection_masks"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputSpec(_Strict):
    """What the graph's single input expects. The service resizes; the graph casts and normalizes."""

    name: str = "images"
    height: int = Field(gt=0)
    width: int = Field(gt=0)
    resize: Literal["stretch", "letterbox"] = "stretch"
    color_order: Literal["RGB", "BGR"] = "RGB"
    dtype: Literal["uint8", "float32"] = "uint8"
    layout: Literal["NHWC", "NCHW"] = "NHWC"
    # Letterbox only: the resized image is pasted top-left and the rest filled with this value per channel.
    pad_value: tuple[int, int, int] = (0, 0, 0)


class Label(_Strict):
    """One class the model predicts; ``detection_classes`` holds an index into the manifest's labels."""

    name: str
    coco_id: int | None = None


class Provenance(_Strict):
    checkpoint_sha256: str | None = None
    training_config: dict[str, Any] = Field(default_factory=dict)
    export_settings: dict[str, Any] = Field(default_factory=dict)
    tool_versions: dict[str, str] = Field(default_factory=dict)
    created_at: str | None = None


class Parent(_Strict):
    """The fp32 artifact a reduced-precision variant was derived from."""

    name: str
    version: str
    file_sha256: str  # of the parent's model file


class IsaAccuracy(_Strict):
    """An artifact's AP with OpenVINO (or ONNX Runtime) running as it does on one CPU class."""

    box_ap: float
    mask_ap: float | None = None
    box_ap_delta: float | None = None  # against the parent's AP of the same record
    mask_ap_delta: float | None = None
    runtime: str  # the backend's description under that class, e.g. openvino[2026.4.0,CPU,f32]
    cap: str | None  # the ONEDNN_MAX_CPU_ISA value it ran under; None: the machine's own class, uncapped


class Accuracy(_Strict):
    """COCO AP of this artifact on a validation split, served as the service serves it; for a variant,
    also its parent's on the same images and the change (``*_delta`` = this - parent)."""

    dataset: str  # how the split is made, e.g. the ``detect-train synth`` command, or its folder
    split: str
    images: int
    annotations_sha256: str  # of the split's annotation file: which ground truth this was measured on
    runtime: str
    box_ap: float
    mask_ap: float | None = None
    parent_box_ap: float | None = None
    parent_mask_ap: float | None = None
    box_ap_delta: float | None = None
    mask_ap_delta: float | None = None
    max_ap_drop: float | None = None  # the gate the variant passed (None: not gated)
    measured_at: str | None = None
    # An INT8 artifact measured on a CPU: the INT8 instructions that CPU gave OpenVINO's kernels (amx_int8,
    # avx512_vnni, avx_vnni, none; unknown without /proc/cpuinfo), whose results differ. None: not recorded
    # (the first INT8 artifacts, all measured with amx_int8) or not INT8 on a CPU.
    cpu_int8: str | None = None
    # AP under each x86 CPU class the gate could reach (`contract.cpu_classes`: "avx2", "avx512_core",
    # "avx512_vnni", "avx512_bf16", "amx"), each measured in a fresh process with ``ONEDNN_MAX_CPU_ISA``
    # capping OpenVINO at that class; empty for figures from before it was recorded.
    by_isa: dict[str, IsaAccuracy] = Field(default_factory=dict)


class SelfCheckSpec(_Strict):
    """Golden inputs carried beside the model (`contract.self_check`): network inputs and the detections
    the artifact gave for them where it was made, which the service re-runs on its own CPU at load."""

    file: str = "golden.npz"
    sha256: str  # of ``file``
    images: int = Field(gt=0)
    min_score: float = Field(ge=0.0, le=1.0)  # detections at or above it are compared
    score_tolerance: float = Field(gt=0.0, le=1.0)  # a matched pair's score may differ by this much
    iou: float = Field(gt=0.0, le=1.0)  # a matched pair's boxes overlap at least this much
    min_agreement: float = Field(gt=0.0, le=1.0)  # the share of agreeing detections the check needs
    reference: str  # the runtime and CPU class that produced the expected detections
    created_at: str | None = None


class Manifest(_Strict):
    schema_version: int = SCHEMA_VERSION
    name: str
    version: str
    architecture: str  # e.g. "ssd300"
    backbone: str | None = None
    format: Literal["onnx", "tensorrt", "openvino"]
    precision: Literal["fp32", "fp16", "bf16", "int8"] = "fp32"
    # INT8 artifacts only: the precision OpenVINO computes the layers left out of quantization in (its
    # INFERENCE_PRECISION_HINT); None means f32. The accuracy gate measured the artifact run that way.
    unquantized_precision: Literal["f32", "bf16"] | None = None
    file: str  # model file name inside the version folder
    input: InputSpec
    outputs: tuple[str, ...] = OUTPUT_NAMES
    labels: tuple[Label, ...]
    score_threshold: float = Field(ge=0.0, le=1.0)
    # The threshold responses use when a request gives none (readable boxed images); None: score_threshold.
    display_score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    iou_threshold: float = Field(ge=0.0, le=1.0)
    max_detections: int = Field(gt=0)
    # Largest batch the artifact accepts; ``dynamic_batch`` False means exactly ``max_batch_size`` per call.
    max_batch_size: int = Field(default=32, gt=0)
    dynamic_batch: bool = True
    mask_size: tuple[int, int] | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    verification: dict[str, Any] = Field(default_factory=dict)
    # Accuracy measured for this artifact, e.g. {"coco_ap": 0.61, "dataset": "synthetic val"}.
    metrics: dict[str, Any] = Field(default_factory=dict)
    # Reduced-precision variants: the fp32 artifact they come from. Every artifact: its measured AP.
    parent: Parent | None = None
    accuracy: Accuracy | None = None
    # What the artifact outputs on its validation split (`contract.quality`): the baseline the service's
    # detect_quality_* metrics are compared with. None: not measured (older manifests).
    quality: QualityBaseline | None = None
    # Golden inputs the service checks at load (`contract.self_check`); None: made before they existed.
    self_check: SelfCheckSpec | None = None

    @model_validator(mode="after")
    def _check_outputs(self) -> Manifest:
        missing = [n for n in OUTPUT_NAMES if n not in self.outputs]
        if missing:
            raise ValueError(f"outputs must include {list(OUTPUT_NAMES)}; missing {missing}")
        if (MASK_OUTPUT in self.outputs) != (self.mask_size is not None):
            raise ValueError(f"mask_size must be set exactly when {MASK_OUTPUT!r} is an output")
        if self.unquantized_precision is not None and self.precision != "int8":
            raise ValueError(f"unquantized_precision is for int8 artifacts; this one is {self.precision}")
        return self

    @property
    def has_masks(self) -> bool:
        return MASK_OUTPUT in self.outputs

    @property
    def default_threshold(self) -> float:
        """The score threshold of a request that gives none."""
        return self.score_threshold if self.display_score_threshold is None else self.display_score_threshold

    @classmethod
    def read(cls, version_dir: str | Path) -> Manifest:
        path = Path(version_dir) / MANIFEST_FILE
        return cls.model_validate(json.loads(path.read_text()))

    def write(self, version_dir: str | Path) -> Path:
        path = Path(version_dir) / MANIFEST_FILE
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path

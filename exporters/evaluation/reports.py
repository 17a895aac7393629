"""Typed verification reports, and the one place that writes them into an artifact's manifest.

`exporters.evaluation.verify` makes a :class:`VerificationReport` (an FP32 graph against eager PyTorch) and
`exporters.precision.fp16` an :class:`Fp16Report` (the FP16 graph against the FP32 one). The manifest keeps
them as
plain JSON (``verification`` and ``verification["fp16"]``), in the layout ``to_dict`` writes; the
``record_*`` functions below are the only writers of those fields (and of the figures they carry into
``metrics`` and ``display_score_threshold``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.manifest import MANIFEST_FILE, Manifest
from contract.quality import QualityBaseline
from exporters.evaluation.coco_ap import APComparison

# {raw output name: {"max_abs_error", "max_rel_error"}}
RawErrors = dict[str, dict[str, float]]


@dataclass(frozen=True)
class ContractCheck:
    """Problems with the output contract (names, dtypes, shapes, descending scores, zero padding)."""

    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "problems": self.problems}


@dataclass(frozen=True)
class CocoCheck:
    """COCO AP of two runs of a model on the same images of a COCO-format split."""

    dataset: str
    split: str
    max_images: int | None
    ap: APComparison

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "max_images": self.max_images,
            **self.ap.to_dict(),
        }


@dataclass
class VerificationReport:
    """An exported FP32 graph against eager PyTorch (`exporters.evaluation.verify`)."""

    passed: bool
    summary: str
    runtime: str
    batch_sizes: list[int]
    tolerances: dict[str, float]
    score_tolerances_used: list[float]
    raw_outputs: RawErrors
    contract: ContractCheck
    detections: dict[str, Any]
    checked_at: str
    masks: dict[str, Any] | None = None
    reference: str = "eager PyTorch: training's preprocessing, network, post-processing (export thresholds)"
    checkpoint_sha256: str | None = None
    checkpoint_sha256_matches: bool | None = None
    coco: CocoCheck | None = None
    display_threshold: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``verification`` layout."""
        return _layout(self, _VERIFICATION_KEYS)


@dataclass
class Fp16Report:
    """The FP16 graph against the FP32 one in ONNX Runtime on the CPU (`exporters.precision.fp16`)."""

    passed: bool
    batch_sizes: list[int]
    tolerances: dict[str, float]
    raw_outputs: RawErrors
    contract: ContractCheck
    # Informational: FP16 legitimately reorders near-equal scores; accuracy is judged by AP.
    detections_vs_fp32: dict[str, Any]
    fp16_share: dict[str, Any]
    masks_vs_fp32: dict[str, Any] | None = None
    runtime: str = "onnxruntime CPUExecutionProvider (FP16 kernels where it has them)"
    coco: CocoCheck | None = None
    fp16_graph: str | None = None
    checked_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``verification["fp16"]`` layout."""
        return _layout(self, _FP16_KEYS)


# The order of the manifest's keys; fields that are None are left out.
_VERIFICATION_KEYS = (
    "passed",
    "summary",
    "runtime",
    "reference",
    "batch_sizes",
    "tolerances",
    "score_tolerances_used",
    "raw_outputs",
    "contract",
    "detections",
    "masks",
    "checked_at",
    "checkpoint_sha256",
    "checkpoint_sha256_matches",
    "coco",
    "display_threshold",
)
_FP16_KEYS = (
    "passed",
    "runtime",
    "batch_sizes",
    "tolerances",
    "raw_outputs",
    "contract",
    "detections_vs_fp32",
    "masks_vs_fp32",
    "fp16_share",
    "coco",
    "fp16_graph",
    "checked_at",
)


def _layout(report: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """``report``'s fields in ``keys`` order as plain JSON values (nested reports by their ``to_dict``)."""
    out = {}
    for key in keys:
        value = getattr(report, key)
        if value is not None:
            out[key] = value.to_dict() if isinstance(value, ContractCheck | CocoCheck) else value
    return out


def write_manifest(manifest: Manifest, directory: Path) -> None:
    """Replace ``directory/manifest.json`` atomically."""
    tmp = directory / f".{MANIFEST_FILE}.tmp"
    tmp.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    os.replace(tmp, directory / MANIFEST_FILE)


def record_verification(
    manifest: Manifest, directory: Path, report: VerificationReport, data: str | None
) -> None:
    """``verification`` := the report; with a COCO check also ``metrics`` (this artifact's AP in ONNX
    Runtime, the checkpoint's kept beside it) and the display threshold measured with it."""
    update: dict[str, Any] = {"verification": report.to_dict()}
    display = report.display_threshold
    if display is not None:
        update["display_score_threshold"] = display["threshold"]
    if report.coco is not None:
        ap = report.coco.ap
        update["metrics"] = {
            "coco_ap": ap.candidate["AP"],
            "dataset": f"{data} ({report.coco.split})",
            "source": "detect-export verify: this artifact in ONNX Runtime",
            "bbox": ap.candidate,
            **({"segm": ap.candidate_segm} if ap.candidate_segm is not None else {}),
            **({"checkpoint": manifest.metrics} if manifest.metrics else {}),
            **({"display_threshold": display} if display else {}),
        }
    write_manifest(manifest.model_copy(update=update), directory)


def record_fp16(manifest: Manifest, directory: Path, report: Fp16Report) -> None:
    """``verification["fp16"]`` := the report (the FP32 verification is kept beside it)."""
    verification = {**manifest.verification, "fp16": report.to_dict()}
    write_manifest(manifest.model_copy(update={"verification": verification}), directory)


def record_display_threshold(
    manifest: Manifest, directory: Path, display: dict[str, Any], quality: QualityBaseline | None = None
) -> None:
    """``display_score_threshold`` := the chosen threshold, its details in ``metrics.display_threshold``;
    ``quality``: the baseline counted at that threshold (else the one counted at the old one is kept only
    when the threshold is unchanged)."""
    metrics = {**manifest.metrics, "display_threshold": display}
    if quality is None and manifest.quality is not None:
        quality = manifest.quality if manifest.quality.display_threshold == display["threshold"] else None
    update = {"display_score_threshold": display["threshold"], "metrics": metrics, "quality": quality}
    write_manifest(manifest.model_copy(update=update), directory)

"""Golden inputs: a few network inputs an artifact carries with the detections it gave for them where it
was made, so a server can check at load, on its own CPU, that it computes the same answers.

The file (``golden.npz`` beside the manifest, named with its sha256 by `contract.manifest.SelfCheckSpec`)
holds, as plain arrays (no pickles):

==================  ===============  =======  =====================================================
key                 shape            dtype    meaning
==================  ===============  =======  =====================================================
image_<i>           [bytes]          uint8    PNG of input ``i``: the network input (H, W, 3), RGB
num_detections      [N, 1]           int32    expected, as the output contract
detection_boxes     [N, K, 4]        float32  expected, normalized x1, y1, x2, y2
detection_scores    [N, K]           float32  expected
detection_classes   [N, K]           int32    expected
==================  ===============  =======  =====================================================

PNG keeps the pixels exact at a third of their raw size. The comparison (:func:`compare`) matches
detections by class and overlap and tolerates what differs legitimately between CPUs (a score a little
higher or lower, a borderline detection on either side of the threshold); what it counts as disagreement
is a clear detection missing, one appearing, or a matched pair whose score or box moved past the
tolerance.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from contract.manifest import InputSpec, SelfCheckSpec

GOLDEN_FILE = "golden.npz"
EXPECTED_KEYS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
# Defaults the exporters write (chosen on the shipped artifacts across CPU classes: docs/quantization.md)
SCORE_TOLERANCE = 0.1
MATCH_IOU = 0.7
MIN_AGREEMENT = 0.9


class GoldenFileError(ValueError):
    """The golden file is missing, unreadable, or does not belong to this artifact (the message names it)."""


@dataclass(frozen=True)
class Golden:
    images: np.ndarray  # uint8 [N, H, W, 3]: network inputs
    expected: dict[str, np.ndarray]  # the output contract's four detection outputs for them


def write_golden(directory: Path, images: np.ndarray, outputs: dict[str, np.ndarray]) -> tuple[str, str]:
    """Write ``golden.npz`` into ``directory``; ``(file name, sha256)``."""
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"golden images must be uint8 [N, H, W, 3], got {images.dtype} {images.shape}")
    arrays: dict[str, np.ndarray] = {}
    for i, image in enumerate(images):
        ok, png = cv2.imencode(".png", np.ascontiguousarray(image[..., ::-1]))  # OpenCV writes BGR
        if not ok:
            raise ValueError(f"golden image {i} could not be encoded as PNG")
        arrays[f"image_{i}"] = png.reshape(-1)
    for key in EXPECTED_KEYS:
        arrays[key] = np.asarray(outputs[key])[: len(images)]
    buffer = io.BytesIO()
    np.savez_compressed(buffer, allow_pickle=False, **arrays)
    path = Path(directory) / GOLDEN_FILE
    path.write_bytes(buffer.getvalue())
    return GOLDEN_FILE, hashlib.sha256(buffer.getvalue()).hexdigest()


def golden_spec(
    file: str, sha256: str, images: int, min_score: float, reference: str, created_at: str | None = None
) -> SelfCheckSpec:
    """The manifest's ``self_check`` for a golden file just written, with this module's tolerances."""
    return SelfCheckSpec(
        file=file,
        sha256=sha256,
        images=images,
        min_score=min_score,
        score_tolerance=SCORE_TOLERANCE,
        iou=MATCH_IOU,
        min_agreement=MIN_AGREEMENT,
        reference=reference,
        created_at=created_at,
    )


def read_golden(directory: Path, spec: SelfCheckSpec, input_spec: InputSpec) -> Golden:
    """The golden inputs ``spec`` names, checked against its sha256 and the artifact's input; raises
    `GoldenFileError` naming the file and what is wrong."""
    path = Path(directory) / spec.file
    if Path(spec.file).name != spec.file or spec.file in ("", ".", ".."):
        raise GoldenFileError(
            f"golden file {spec.file!r}: the manifest must name a file beside it, not a path"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GoldenFileError(f"golden file {path} cannot be read: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise GoldenFileError(
            f"golden file {path} has sha256 {digest[:12]}..., the manifest names {spec.sha256[:12]}...: "
            "truncated, or written for another version of the model"
        )
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise GoldenFileError(f"golden file {path} is not a readable .npz: {exc}") from exc
    missing = [k for k in (*EXPECTED_KEYS, *(f"image_{i}" for i in range(spec.images))) if k not in arrays]
    if missing:
        raise GoldenFileError(f"golden file {path} lacks {missing}")
    images = []
    for i in range(spec.images):
        try:
            image = cv2.imdecode(arrays[f"image_{i}"], cv2.IMREAD_COLOR)
        except cv2.error:  # an empty or non-byte array
            image = None
        expected_shape = (input_spec.height, input_spec.width, 3)
        if image is None or image.shape != expected_shape:
            shape = None if image is None else image.shape
            raise GoldenFileError(
                f"golden file {path}: image_{i} is {shape}, the model takes {expected_shape}"
            )
        images.append(image[..., ::-1])
    expected = {key: arrays[key] for key in EXPECTED_KEYS}
    boxes = expected["detection_boxes"]
    k = boxes.shape[1] if boxes.ndim == 3 else -1
    shapes = {
        "num_detections": (spec.images, 1),
        "detection_boxes": (spec.images, k, 4),
        "detection_scores": (spec.images, k),
        "detection_classes": (spec.images, k),
    }
    for key, shape in shapes.items():
        if expected[key].shape != shape:
            raise GoldenFileError(
                f"golden file {path}: {key} has shape {expected[key].shape}, expected {shape} "
                f"for {spec.images} images"
            )
    if int(expected["num_detections"].max(initial=0)) > k:
        raise GoldenFileError(f"golden file {path}: num_detections exceeds the {k} rows of detection_boxes")
    return Golden(np.ascontiguousarray(np.stack(images)), expected)


# ------------------------------------------------------------------------------------------ comparison


@dataclass
class CheckResult:
    """How far a run's detections agree with the golden ones."""

    passed: bool
    agreement: float  # agreeing / (agreeing + disagreeing) detections; 1.0 when neither side has any
    agreeing: int = 0
    missing: int = 0  # expected, clearly above the threshold, not found
    unexpected: int = 0  # found, clearly above the threshold, not expected
    moved: int = 0  # matched, but the score or the box moved past the tolerance
    max_score_error: float = 0.0  # over matched pairs
    min_iou: float = 1.0  # over matched pairs
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "agreement": round(self.agreement, 4),
            "agreeing": self.agreeing,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "moved": self.moved,
            "max_score_error": round(self.max_score_error, 4),
            "min_iou": round(self.min_iou, 4),
        }


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    with np.errstate(all="ignore"):
        iou = inter / (area + areas - inter)
    return np.asarray(np.nan_to_num(iou), dtype=np.float64)


def _rows(outputs: dict[str, np.ndarray], i: int, floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = int(outputs["num_detections"][i, 0])
    scores = np.asarray(outputs["detection_scores"][i, :n], dtype=np.float64)
    keep = scores >= floor
    boxes = np.asarray(outputs["detection_boxes"][i, :n], dtype=np.float64)[keep]
    return boxes, scores[keep], np.asarray(outputs["detection_classes"][i, :n])[keep]


def compare(
    expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], spec: SelfCheckSpec
) -> CheckResult:
    """Match ``actual`` detections to ``expected`` image by image (same class, IoU at least ``spec.iou``,
    greedily by expected score) among those within ``score_tolerance`` of ``min_score``; a detection
    clearly above ``min_score`` on one side with no partner on the other disagrees, and so does a pair
    whose scores differ by more than the tolerance."""
    tol, floor = spec.score_tolerance, spec.min_score
    result = CheckResult(passed=False, agreement=1.0)
    for i in range(len(expected["num_detections"])):
        e_boxes, e_scores, e_classes = _rows(expected, i, floor - tol)
        a_boxes, a_scores, a_classes = _rows(actual, i, floor - tol)
        used = np.zeros(len(a_scores), dtype=bool)
        for j in np.argsort(-e_scores, kind="stable"):
            candidates = (~used) & (a_classes == e_classes[j])
            ious = np.where(candidates, _iou(e_boxes[j], a_boxes), 0.0) if len(a_scores) else np.zeros(0)
            best = int(np.argmax(ious)) if len(ious) else -1
            if best < 0 or ious[best] < spec.iou * 0.5:  # no partner at all
                if e_scores[j] >= floor + tol:
                    result.missing += 1
                continue
            used[best] = True
            if max(e_scores[j], a_scores[best]) < floor:
                continue  # both below the threshold: nothing a user sees
            error = abs(float(e_scores[j] - a_scores[best]))
            result.max_score_error = max(result.max_score_error, error)
            result.min_iou = min(result.min_iou, float(ious[best]))
            if error > tol or ious[best] < spec.iou:
                result.moved += 1
            else:
                result.agreeing += 1
        result.unexpected += int(np.count_nonzero((~used) & (a_scores >= floor + tol)))
    disagreeing = result.missing + result.unexpected + result.moved
    total = result.agreeing + disagreeing
    result.agreement = result.agreeing / total if total else 1.0
    result.passed = result.agreement >= spec.min_agreement
    if not result.passed:
        result.problems.append(
            f"agreement {result.agreement:.3f} < {spec.min_agreement}: {result.missing} expected detections "
            f"missing, {result.unexpected} unexpected, {result.moved} moved past score tolerance {tol} or "
            f"IoU {spec.iou}"
        )
    return result

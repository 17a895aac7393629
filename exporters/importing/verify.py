"""An imported graph against the source's own runtime, on sample images: the raw head outputs, one batch
against single images, and the detections against ``reference`` (decode + torchvision NMS).

Disagreement raises ``VerificationError`` naming the image, the output and the size of the difference; an
artifact is written only after this passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from exporters.errors import VerificationError
from exporters.importing.heads import CONTRACT, IMAGES, SOURCE_PREFIX
from exporters.importing.reference import Detections, reference_detections
from exporters.importing.source import SourceModel
from exporters.importing.spec import ImportSpec
from exporters.onnx.graph import with_outputs


@dataclass
class Tolerances:
    raw: float = 1e-3  # max abs difference of any raw head output
    box_px: float = 0.5  # in the sample image's own pixels
    score: float = 1e-3


@dataclass
class Sample:
    name: str
    size: tuple[int, int]  # original height, width
    resized: np.ndarray  # uint8 [H, W, 3] at the network input, in the model's colour order


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def verify_import(
    spec: ImportSpec,
    source: SourceModel,
    graph: onnx.ModelProto,
    samples: list[Sample],
    raw_reference: dict[str, np.ndarray],
    anchors: np.ndarray | None,
    tolerances: Tolerances,
) -> dict[str, Any]:
    names = list(raw_reference)
    inside = [SOURCE_PREFIX + name for name in names]
    session = ort.InferenceSession(
        with_outputs(graph, inside).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    batch = np.stack([s.resized for s in samples])
    results = session.run([*CONTRACT, *inside], {IMAGES: batch})
    outputs = dict(zip(CONTRACT, results[: len(CONTRACT)], strict=True))
    raw_outputs = dict(zip(names, results[len(CONTRACT) :], strict=True))
    report = Report()
    _compare_raw(raw_reference, raw_outputs, samples, tolerances, report)
    single = session.run(CONTRACT, {IMAGES: batch[:1]})
    batch_error = max(float(np.abs(a - outputs[n][:1]).max()) for n, a in zip(CONTRACT, single, strict=True))
    report.details["batch_vs_single_max_abs_error"] = batch_error
    if batch_error > tolerances.score:
        report.problems.append(f"batch of {len(samples)} differs from a single image by {batch_error:.2e}")
    _compare_detections(spec, raw_reference, outputs, samples, anchors, tolerances, report)
    summary = (
        f"raw max abs err {report.details['raw_max_abs_error']:.2e}; detections "
        f"{report.details['matched']}/{report.details['reference_detections']} matched, max box err "
        f"{report.details['max_box_error_px']:.3f} px, max score err {report.details['max_score_error']:.2e}"
    )
    if report.problems:
        raise VerificationError(
            "imported graph disagrees with the source runtime: " + "; ".join(report.problems)
        )
    return {
        "passed": True,
        "summary": summary,
        "runtime": f"onnxruntime {ort.__version__} CPUExecutionProvider",
        "reference": f"{_runtime_name(source)} on the source model; decode + torchvision batched_nms",
        "images": [s.name for s in samples],
        "tolerances": {"raw_abs": tolerances.raw, "box_px": tolerances.box_px, "score": tolerances.score},
        **report.details,
    }


def _runtime_name(source: SourceModel) -> str:
    if source.format == "tflite":
        import ai_edge_litert

        return f"ai-edge-litert {getattr(ai_edge_litert, '__version__', '')}".strip()
    return f"onnxruntime {ort.__version__}"


def _compare_raw(
    reference: dict[str, np.ndarray],
    outputs: dict[str, np.ndarray],
    samples: list[Sample],
    tolerances: Tolerances,
    report: Report,
) -> None:
    worst = 0.0
    for name, expected in reference.items():
        for i, sample in enumerate(samples):
            error = float(np.abs(outputs[name][i].astype(np.float64) - expected[i]).max())
            worst = max(worst, error)
            if error > tolerances.raw:
                report.problems.append(
                    f"{sample.name}: output {name!r} differs by {error:.2e} (> {tolerances.raw})"
                )
    report.details["raw_max_abs_error"] = worst


def _compare_detections(
    spec: ImportSpec,
    raw: dict[str, np.ndarray],
    outputs: dict[str, np.ndarray],
    samples: list[Sample],
    anchors: np.ndarray | None,
    tolerances: Tolerances,
    report: Report,
) -> None:
    totals = {"reference_detections": 0, "matched": 0, "max_box_error_px": 0.0, "max_score_error": 0.0}
    for i, sample in enumerate(samples):
        expected = reference_detections(spec, raw, i, anchors)
        n = int(outputs["num_detections"][i, 0])
        actual = Detections(
            outputs["detection_boxes"][i, :n],
            outputs["detection_scores"][i, :n],
            outputs["detection_classes"][i, :n],
        )
        _match(sample, expected, actual, spec.postprocess.score_threshold, tolerances, report, totals)
    report.details.update(totals)


def _match(
    sample: Sample,
    expected: Detections,
    actual: Detections,
    threshold: float,
    tolerances: Tolerances,
    report: Report,
    totals: dict[str, Any],
) -> None:
    """Each reference detection against an unmatched artifact detection of its class (nearest box);
    unmatched ones on either side count unless their score is within the score tolerance of the threshold."""
    h, w = sample.size
    scale = np.array([w, h, w, h], dtype=np.float64)
    free = list(range(len(actual.scores)))
    totals["reference_detections"] += len(expected.scores)
    for box, score, cls in zip(expected.boxes, expected.scores, expected.classes, strict=True):
        same_class = [j for j in free if int(actual.classes[j]) == int(cls)]
        errors = [float(np.abs((actual.boxes[j] - box) * scale).max()) for j in same_class]
        if not errors or min(errors) > tolerances.box_px:
            if score - threshold > tolerances.score:
                report.problems.append(
                    f"{sample.name}: reference detection class {int(cls)} score {score:.4f} at "
                    f"{np.round(box * scale, 1).tolist()} has no match within {tolerances.box_px} px"
                )
            continue
        j = same_class[int(np.argmin(errors))]
        free.remove(j)
        totals["matched"] += 1
        totals["max_box_error_px"] = max(totals["max_box_error_px"], min(errors))
        totals["max_score_error"] = max(
            totals["max_score_error"], abs(float(actual.scores[j]) - float(score))
        )
        if abs(float(actual.scores[j]) - float(score)) > tolerances.score:
            report.problems.append(
                f"{sample.name}: class {int(cls)} score {actual.scores[j]:.4f} != {score:.4f}"
            )
    for j in free:
        if float(actual.scores[j]) - threshold > tolerances.score:
            report.problems.append(
                f"{sample.name}: detection class {int(actual.classes[j])} score {actual.scores[j]:.4f} "
                "is not in the reference"
            )

"""FP16 accuracy against FP32 in ONNX Runtime on the CPU, for graphs made by `exporters.precision.fp16_graph`.

The FP16 graph (only the network body in FP16, see `exporters.precision.fp16_graph`) is compared with its FP32
parent on generated batches (raw head errors, output contract, detection agreement) and, with a
COCO-format split, by COCO AP through `exporters.evaluation.coco_ap`; the report is an
:class:`~exporters.evaluation.reports.Fp16Report`, written into the manifest as ``verification["fp16"]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from onnx import ModelProto

from contract.manifest import MASK_OUTPUT, Manifest
from exporters.artifact import read_artifact, utc_now
from exporters.errors import InvalidModelError
from exporters.evaluation.coco_ap import APComparison, evaluate_split
from exporters.evaluation.compare import Agreement, Detections, contract_problems
from exporters.evaluation.reports import CocoCheck, ContractCheck, Fp16Report, record_fp16
from exporters.evaluation.verify import (
    generated_batches,
    manifest_resize,
    manifest_to_original,
    onnx_detector,
    raw_names_from_manifest,
)
from exporters.onnx.graph import load_checked, with_outputs
from exporters.onnx.ort_cpu import contract_names, cpu_session
from exporters.precision.fp16_graph import (
    SENSITIVE_OP_TYPES,
    convert_to_fp16,
    fp16_fraction,
    split_nodes,
    topological_order,
)

__all__ = [
    "SENSITIVE_OP_TYPES",
    "Fp16Tolerances",
    "compare_fp16",
    "convert_to_fp16",
    "fp16_accuracy",
    "fp16_eval",
    "fp16_fraction",
    "fp16_scopes",
    "split_nodes",
    "topological_order",
]


@dataclass(frozen=True)
class Fp16Tolerances:
    """FP16 vs FP32 in ONNX Runtime: raw outputs relative to their range, detections by AP."""

    raw_rel: float = 1e-2
    box: float = 1e-2
    score: float = 1e-2
    ap: float = 0.002


def fp16_scopes(manifest: Manifest) -> tuple[str, ...]:
    """The artifact's FP16 scopes (see :func:`split_nodes`), empty for single-stage detectors."""
    return tuple(str(s) for s in manifest.provenance.export_settings.get("fp16_scopes", ()))


def io_types(model: ModelProto) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)}


def compare_fp16(
    fp32: ModelProto,
    fp16: ModelProto,
    raw_outputs: list[str],
    batches: list[np.ndarray],
    *,
    score_threshold: float,
    iou_threshold: float,
    max_detections: int,
    tolerances: Fp16Tolerances | None = None,
) -> Fp16Report:
    """FP16 vs FP32 on the CPU (ONNX Runtime): raw head errors, contract, detection agreement."""
    tol = tolerances or Fp16Tolerances()
    types32, types16 = io_types(fp32), io_types(fp16)
    problems = [
        f"{name}: FP32 type {t}, FP16 type {types16.get(name)}"
        for name, t in types32.items()
        if types16.get(name) != t
    ]
    sess32 = cpu_session(with_outputs(fp32, raw_outputs))
    sess16 = cpu_session(with_outputs(fp16, raw_outputs))
    contract = contract_names(sess32)
    names = [*contract, *raw_outputs]
    agreement = Agreement(raw_outputs)
    for batch in batches:
        out32 = dict(zip(names, sess32.run(names, {"images": batch}), strict=True))
        out16 = dict(zip(names, sess16.run(names, {"images": batch}), strict=True))
        for name in raw_outputs:
            agreement.add_raw(name, out32[name], out16[name].astype(np.float32))
        problems += contract_problems({n: out16[n] for n in contract}, len(batch), max_detections)
        agreement.add_detections(
            Detections.from_contract(out32),
            Detections.from_contract(out16),
            box_tol=tol.box,
            score_tol=tol.score,
            score_threshold=score_threshold,
            iou_threshold=iou_threshold,
            max_detections=max_detections,
        )
    return Fp16Report(
        passed=agreement.raw_within(tol.raw_rel) and not problems,
        batch_sizes=[int(b.shape[0]) for b in batches],
        tolerances=asdict(tol),
        raw_outputs=agreement.raw_outputs,
        contract=ContractCheck(problems),
        detections_vs_fp32=agreement.detections(),
        masks_vs_fp32=agreement.masks() if MASK_OUTPUT in contract else None,
        fp16_share=fp16_fraction(fp16),
    )


def fp16_accuracy(
    fp32: ModelProto,
    fp16: ModelProto,
    manifest: Manifest,
    data: str | None = None,
    split: str | None = None,
    max_images: int | None = None,
    batch_size: int = 8,
    tolerances: Fp16Tolerances | None = None,
) -> Fp16Report:
    """FP16 vs FP32 in ONNX Runtime on the CPU: generated images always, COCO AP when ``data`` is given."""
    tol = tolerances or Fp16Tolerances()
    resize = manifest_resize(manifest)
    report = compare_fp16(
        fp32,
        fp16,
        raw_names_from_manifest(manifest),
        generated_batches(resize),
        score_threshold=manifest.score_threshold,
        iou_threshold=manifest.iou_threshold,
        max_detections=manifest.max_detections,
        tolerances=tol,
    )
    if data is not None:
        from training.train import default_split

        split = split or default_split(data, "val")
        evaluators = evaluate_split(
            {"fp32": onnx_detector(cpu_session(fp32)), "fp16": onnx_detector(cpu_session(fp16))},
            root=data,
            split=split,
            categories=[{"id": label.coco_id, "name": label.name} for label in manifest.labels],
            resize=resize,
            batch_size=batch_size,
            max_images=max_images,
            to_original=manifest_to_original(manifest),
        )
        ap = APComparison.of(evaluators, "fp32", "fp16", masks=manifest.has_masks)
        report.coco = CocoCheck(str(data), split, max_images, ap)
        report.passed = report.passed and ap.within(tol.ap)
    return report


def fp16_eval(
    artifact_dir: str | Path,
    fp16_path: str | Path | None = None,
    data: str | None = None,
    split: str | None = None,
    max_images: int | None = None,
    write: bool = True,
) -> Fp16Report:
    """``detect-export fp16-eval``: FP16 vs FP32 accuracy of an FP32 ONNX artifact on the CPU.

    The FP16 graph is ``fp16_path`` (e.g. a ``trt`` output's ``model.fp16.onnx``) or converted here.
    With ``write`` the report goes into the artifact's manifest as ``verification["fp16"]``.
    """
    artifact_dir = Path(artifact_dir)
    manifest, model_path = read_artifact(artifact_dir)
    if manifest.format != "onnx" or manifest.precision != "fp32":
        raise InvalidModelError(
            f"{artifact_dir} is a {manifest.format}/{manifest.precision} artifact; need FP32 ONNX"
        )
    fp32 = load_checked(model_path)
    raw = raw_names_from_manifest(manifest)
    fp16 = (
        load_checked(fp16_path)
        if fp16_path is not None
        else convert_to_fp16(fp32, manifest.input.name, raw, fp16_scopes(manifest))
    )
    report = fp16_accuracy(fp32, fp16, manifest, data, split, max_images)
    report.fp16_graph = str(fp16_path) if fp16_path is not None else "converted from the artifact"
    report.checked_at = utc_now()
    if write:
        record_fp16(manifest, artifact_dir, report)
    return report

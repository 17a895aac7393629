"""Verification: an exported graph against eager PyTorch on the same uint8 inputs.

Checked on at least two batches of different sizes and content (1 and 3 images by default):

- raw head outputs of the artifact graph (exposed from its named intermediates) against the eager
  network on training's own preprocessing: max abs and relative error;
- the output contract (names, dtypes, shapes, descending scores, zero padding);
- detections against training's eager post-processing run with the artifact's thresholds, matched
  one-to-one (``exporters.evaluation.compare``);
- with a COCO-format dataset, COCO AP of both through the same pycocotools evaluation.

The report is a :class:`~exporters.evaluation.reports.VerificationReport`, stored in
``manifest.verification``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import ModelProto

from contract.geometry import letterbox_geometry, resize_for_network, stretch_to_original
from contract.manifest import Manifest
from exporters.artifact import read_artifact, utc_now
from exporters.errors import ExportError, InvalidModelError
from exporters.evaluation.coco_ap import APComparison, Detector, Resize, ToOriginal, evaluate_split
from exporters.evaluation.compare import Agreement, Detections, contract_problems
from exporters.evaluation.reports import (
    CocoCheck,
    ContractCheck,
    VerificationReport,
    record_display_threshold,
    record_verification,
)
from exporters.evaluation.served_eval import served_display_threshold
from exporters.onnx.graph import load_checked, with_outputs
from exporters.onnx.ort_cpu import cpu_session, run_contract
from exporters.onnx.postprocess_graph import PostprocessSettings
from exporters.onnx.wrappers import ExportWrapper, wrapper_for
from training.checkpoint import sha256_file
from training.weights import load_checkpoint


@dataclass(frozen=True)
class Tolerances:
    """FP32 ONNX Runtime vs eager PyTorch. ``raw_rel`` is max abs error / max |eager| per raw output."""

    raw_rel: float = 1e-4
    box: float = 1e-4
    score: float = 1e-5
    # A score moves by at most twice its logits' error (softmax; sigmoid a quarter of it), and a young
    # model's logits reach 1e5, where float32 rounding alone is ~1e-2: matching uses
    # max(score, min(score_cap, 2 x the batch's largest raw abs error)). The raw outputs are still held to
    # ``raw_rel``, so a broken graph fails there.
    score_cap: float = 1e-3
    ap: float = 1e-3
    # Mask models: largest difference of a matched detection's mask probabilities.
    mask: float = 1e-3


# Weights stored as float16 (``--weight-storage float16``) round every weight by up to 2**-11 relative:
# the raw outputs and detections move by ~1e-3, so they are compared looser; AP keeps its tolerance.
FP16_WEIGHTS_TOLERANCES = Tolerances(raw_rel=1e-2, box=1e-2, score=1e-2, ap=1e-3, mask=5e-2, score_cap=1e-2)


def tolerances_for(weight_storage: str) -> Tolerances:
    return FP16_WEIGHTS_TOLERANCES if weight_storage == "float16" else Tolerances()


def generated_batches(resize: Resize, sizes: tuple[int, ...] = (1, 3), seed: int = 0) -> list[np.ndarray]:
    """Batches of the given sizes, each image different: synthetic scenes with shapes (the project's own
    generator), uniform noise and a smooth gradient, each passed through ``resize`` (to the input size)."""
    from training.data.synthetic import render_sample

    rng = np.random.default_rng(seed)
    batches = []
    for size in sizes:
        images = []
        for i in range(size):
            image: np.ndarray
            kind = i % 3
            if kind == 0:
                image, _ = render_sample(rng)
            elif kind == 1:
                image = rng.integers(
                    0, 256, size=(int(rng.integers(200, 500)), int(rng.integers(200, 500)), 3)
                )
            else:
                ramp = np.linspace(0, 255, 320, dtype=np.float32)
                image = np.stack(
                    [
                        ramp[None, :].repeat(240, 0),
                        ramp[:240, None].repeat(320, 1),
                        np.full((240, 320), float(rng.integers(256))),
                    ],
                    axis=2,
                )
            images.append(resize(np.asarray(image, dtype=np.uint8)))
        batches.append(np.stack(images))
    return batches


def manifest_resize(manifest: Manifest) -> Resize:
    """The artifact's input resize (`contract.geometry`: the service's, and training's), network input
    only."""
    return lambda image: resize_for_network(image, manifest.input)[0]


def manifest_to_original(manifest: Manifest) -> ToOriginal:
    """The inverse of :func:`manifest_resize` for boxes (normalized -> original pixels), as the service."""
    spec = manifest.input
    if spec.resize == "letterbox":
        return lambda boxes, size: letterbox_geometry(*size, spec.height, spec.width).boxes_to_original(boxes)
    return stretch_to_original


def verify_model(
    model: ModelProto,
    wrapper: ExportWrapper,
    settings: PostprocessSettings,
    raw_names: list[str],
    batches: list[np.ndarray] | None = None,
    tolerances: Tolerances | None = None,
) -> VerificationReport:
    """Compare ``model`` (an artifact graph) with eager PyTorch; the report says whether it ``passed``.

    ``raw_names`` are the graph's intermediate tensors holding ``wrapper.raw_output_names`` in order.
    """
    tol = tolerances or Tolerances()
    floors = {k: max(getattr(tol, k), v) for k, v in wrapper.tolerance_floors.items()}
    tol = replace(tol, **floors)
    batches = batches if batches is not None else generated_batches(wrapper.resize)
    if len({b.shape[0] for b in batches}) < 2:
        raise ValueError(
            f"verification needs batches of at least two sizes, got {[b.shape[0] for b in batches]}"
        )
    agreement = Agreement(raw_names)
    problems: list[str] = []
    score_tols: list[float] = []
    session = cpu_session(model)
    raw_session = cpu_session(with_outputs(model, raw_names))
    for batch in batches:
        raw_eager = wrapper.raw_outputs(batch)
        raw_ort = raw_session.run(raw_names, {"images": batch})
        batch_abs = max(
            agreement.add_raw(name, ref.numpy(), got)
            for name, got, ref in zip(raw_names, raw_ort, raw_eager, strict=True)
        )
        score_tols.append(max(tol.score, min(tol.score_cap, 2 * batch_abs)))
        outputs = run_contract(session, batch)
        problems += [
            f"batch of {batch.shape[0]}: {p}"
            for p in contract_problems(outputs, len(batch), settings.max_detections)
        ]
        if not problems:
            agreement.add_detections(
                wrapper.eager_detections(raw_eager, settings),
                Detections.from_contract(outputs),
                box_tol=tol.box,
                score_tol=score_tols[-1],
                score_threshold=settings.score_threshold,
                iou_threshold=settings.iou_threshold,
                max_detections=settings.max_detections,
            )
    return _report(agreement, problems, tol, score_tols, [int(b.shape[0]) for b in batches], wrapper)


def _report(
    agreement: Agreement,
    problems: list[str],
    tol: Tolerances,
    score_tols: list[float],
    batch_sizes: list[int],
    wrapper: ExportWrapper,
) -> VerificationReport:
    """Judge the accumulated comparison of :func:`verify_model` against ``tol``."""
    detections = agreement.detections()
    det_ok = not problems and detections["unexplained"] == 0 and detections["reference"] > 0
    summary = (
        "; ".join(f"{n} rel err {r['max_rel_error']:.2e}" for n, r in agreement.raw_outputs.items())
        + f"; detections {detections['matched']}/{detections['reference']} matched, "
        f"{detections['unexplained']} unexplained" + ("" if not problems else f"; contract: {problems[:3]}")
    )
    if detections["reference"] == 0:
        summary += "; the eager model detected nothing, so detections were not compared"
    masks = None
    if wrapper.mask_size is not None:  # matched detections' masks: probabilities within tolerance
        masks = agreement.masks()
        det_ok = det_ok and masks["pairs"] > 0 and masks["max_abs_error"] <= tol.mask
        summary += f"; masks max abs err {masks['max_abs_error']:.2e} over {masks['pairs']} pairs"
    return VerificationReport(
        passed=agreement.raw_within(tol.raw_rel) and det_ok,
        summary=summary,
        runtime=f"onnxruntime {ort.__version__} CPUExecutionProvider",
        batch_sizes=batch_sizes,
        tolerances=asdict(tol),
        score_tolerances_used=score_tols,
        raw_outputs=agreement.raw_outputs,
        contract=ContractCheck(problems),
        detections=detections,
        masks=masks,
        checked_at=utc_now(),
    )


def eager_detector(wrapper: ExportWrapper, settings: PostprocessSettings) -> Detector:
    def detect(images: np.ndarray) -> list[Detections]:
        return wrapper.eager_detections(wrapper.raw_outputs(images), settings)

    return detect


def onnx_detector(session: ort.InferenceSession) -> Detector:
    def detect(images: np.ndarray) -> list[Detections]:
        return Detections.from_contract(run_contract(session, images))

    return detect


def settings_from_manifest(manifest: Manifest, wrapper: ExportWrapper) -> PostprocessSettings:
    post = manifest.provenance.export_settings.get("postprocess", {})
    return PostprocessSettings(
        score_threshold=manifest.score_threshold,
        iou_threshold=manifest.iou_threshold,
        topk_per_class=int(post.get("topk_per_class", wrapper.default_settings.topk_per_class)),
        max_detections=manifest.max_detections,
        pre_nms_topk=post.get("pre_nms_topk"),
    )


def raw_names_from_manifest(manifest: Manifest) -> list[str]:
    names = manifest.provenance.export_settings.get("raw_outputs")
    if not isinstance(names, list) or not names:
        raise InvalidModelError(
            f"manifest of {manifest.name}/{manifest.version} does not list its raw outputs "
            "(provenance.export_settings.raw_outputs); was it written by detect-export onnx?"
        )
    return [str(n) for n in names]


def check_same_model(manifest: Manifest, wrapper: ExportWrapper) -> None:
    """The checkpoint must be of the artifact's architecture and label set."""
    if manifest.architecture != wrapper.architecture:
        raise ExportError(
            f"artifact architecture {manifest.architecture!r} differs from the checkpoint's "
            f"{wrapper.architecture!r}"
        )
    if tuple(manifest.labels) != tuple(wrapper.labels()):
        raise ExportError("the artifact's labels differ from the checkpoint's categories")


def verify_artifact(
    artifact_dir: str | Path,
    checkpoint: str | Path,
    data: str | None = None,
    split: str | None = None,
    batch_size: int = 8,
    max_images: int | None = None,
    tolerances: Tolerances | None = None,
    write: bool = True,
) -> VerificationReport:
    """``detect-export verify``: the report, also written into the artifact's manifest when ``write``."""
    artifact_dir = Path(artifact_dir)
    manifest, model_path = read_artifact(artifact_dir)
    tol = tolerances or tolerances_for(manifest.provenance.export_settings.get("weight_storage", "float32"))
    if manifest.format != "onnx" or manifest.precision != "fp32":
        raise InvalidModelError(
            f"{artifact_dir} holds a {manifest.format}/{manifest.precision} artifact; verify compares FP32 "
            "ONNX artifacts with eager PyTorch (use fp16-eval for FP16)"
        )
    model = load_checked(model_path)
    ckpt = load_checkpoint(checkpoint)
    wrapper = wrapper_for(ckpt)
    check_same_model(manifest, wrapper)
    settings = settings_from_manifest(manifest, wrapper)
    report = verify_model(model, wrapper, settings, raw_names_from_manifest(manifest), tolerances=tol)
    report.checkpoint_sha256 = sha256_file(checkpoint)
    report.checkpoint_sha256_matches = report.checkpoint_sha256 == manifest.provenance.checkpoint_sha256
    if data is not None:
        _check_coco(
            report, model, wrapper, settings, ckpt.categories, data, split, batch_size, max_images, tol
        )
    if write:
        record_verification(manifest, artifact_dir, report, data)
    return report


def _check_coco(
    report: VerificationReport,
    model: ModelProto,
    wrapper: ExportWrapper,
    settings: PostprocessSettings,
    categories: list[dict[str, Any]],
    data: str,
    split: str | None,
    batch_size: int,
    max_images: int | None,
    tol: Tolerances,
) -> None:
    """COCO AP (and mask AP) of eager PyTorch and the graph on a split, and the display threshold, added
    to ``report``; it passes only if the APs agree within ``tol.ap``."""
    from training.train import default_split

    split = split or default_split(data, "val")
    evaluators = evaluate_split(
        {"eager": eager_detector(wrapper, settings), "onnx": onnx_detector(cpu_session(model))},
        root=data,
        split=split,
        categories=categories,
        resize=wrapper.resize,
        batch_size=batch_size,
        max_images=max_images,
        to_original=wrapper.to_original,
    )
    ap = APComparison.of(evaluators, "eager", "onnx", masks=wrapper.mask_size is not None)
    report.coco = CocoCheck(str(data), split, max_images, ap)
    report.summary += f"; COCO AP eager {ap.reference['AP']:.4f} onnx {ap.candidate['AP']:.4f}"
    report.display_threshold = display = served_display_threshold(evaluators["onnx"], data, split)
    if display is not None:
        report.summary += f"; display threshold {display['threshold']:.4f} (F1 {display['f1']:.3f})"
    if ap.reference_segm is not None and ap.candidate_segm is not None:
        report.summary += f"; mask AP eager {ap.reference_segm['AP']:.4f} onnx {ap.candidate_segm['AP']:.4f}"
    report.passed = report.passed and ap.within(tol.ap)


def artifact_display_threshold(
    artifact_dir: str | Path,
    data: str,
    split: str | None = None,
    batch_size: int = 8,
    max_images: int | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """``detect-export display-threshold``: the artifact alone (no checkpoint), served as the service
    serves it (`exporters.evaluation.served_eval`, any format the service runs here) on a COCO-format split;
    writes
    ``display_score_threshold`` (and ``metrics.display_threshold``)."""
    from exporters.evaluation.served_eval import served_metrics

    artifact_dir = Path(artifact_dir)
    manifest, _ = read_artifact(artifact_dir)
    measured = served_metrics(artifact_dir, data, split, max_images=max_images, batch_size=batch_size)
    display: dict[str, Any] | None = measured["display_threshold"]
    if display is None:
        raise ExportError(
            f"the model detected nothing on {data} ({measured['split']}): no threshold to choose"
        )
    display["coco_ap"] = measured["bbox"]["AP"]
    if write:
        quality = measured["detections"].quality(display["threshold"])
        record_display_threshold(manifest, artifact_dir, display, quality)
    return display

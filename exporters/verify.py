"""Verification: an exported graph against eager PyTorch on the same uint8 inputs.

Checked on at least two batches of different sizes and content (1 and 3 images by default):

- raw head outputs of the artifact graph (exposed from its named intermediates) against the eager
  network on training's own preprocessing: max abs and relative error;
- the output contract (names, dtypes, shapes, descending scores, zero padding);
- detections against training's eager post-processing run with the artifact's thresholds, matched
  one-to-one (``exporters.compare``);
- with a COCO-format dataset, COCO AP of both through the same pycocotools evaluation.

The report is a plain dict stored in ``manifest.verification``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import ModelProto

from exporters.artifact import read_artifact, utc_now
from exporters.coco_ap import (
    Detector,
    Resize,
    ToOriginal,
    coco_evaluators,
    stretch_to_original,
)
from exporters.compare import (
    Detections,
    contract_problems,
    mask_errors,
    match_detections,
    raw_errors,
    summarize_matches,
)
from exporters.errors import ExportError, InvalidModelError
from exporters.onnx_graph import load_checked, with_outputs
from exporters.postprocess_graph import PostprocessSettings
from exporters.runtime import cpu_session, run_contract
from exporters.served_eval import served_display_threshold
from exporters.wrappers import ExportWrapper, get_wrapper
from service.geometry import letterbox_geometry
from service.imaging import resize_for_network
from service.manifest import MANIFEST_FILE, Manifest
from training.checkpoint import load_checkpoint, sha256_file


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
    """Training's resize to the artifact's input size, in the manifest's mode (stretch or letterbox)."""
    return lambda image: resize_for_network(image, manifest.input)[0]


def manifest_to_original(manifest: Manifest) -> ToOriginal:
    """The inverse of :func:`manifest_resize` for boxes (normalized -> original pixels), as the service."""
    spec = manifest.input
    if spec.resize == "letterbox":
        return lambda boxes, size: letterbox_geometry(*size, spec.height, spec.width).boxes_to_original(boxes)
    return stretch_to_original


def _runtime_name() -> str:
    return f"onnxruntime {ort.__version__} CPUExecutionProvider"


def verify_model(
    model: ModelProto,
    wrapper: ExportWrapper,
    settings: PostprocessSettings,
    raw_names: list[str],
    batches: list[np.ndarray] | None = None,
    tolerances: Tolerances | None = None,
) -> dict[str, Any]:
    """Compare ``model`` (an artifact graph) with eager PyTorch; returns the report (``passed`` + details).

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
    session = cpu_session(model)
    raw_session = cpu_session(with_outputs(model, raw_names))
    raw_report: dict[str, dict[str, float]] = {
        n: {"max_abs_error": 0.0, "max_rel_error": 0.0} for n in raw_names
    }
    problems: list[str] = []
    matches = []
    references: list[Detections] = []
    actuals: list[Detections] = []
    score_tols: list[float] = []
    for batch in batches:
        raw_ort = raw_session.run(raw_names, {"images": batch})
        raw_eager = wrapper.raw_outputs(batch)
        batch_abs = 0.0
        for name, got, ref in zip(raw_names, raw_ort, raw_eager, strict=True):
            err = raw_errors(ref.numpy(), got)
            batch_abs = max(batch_abs, err["max_abs_error"])
            for key in err:
                raw_report[name][key] = max(raw_report[name][key], err[key])
        score_tols.append(max(tol.score, min(tol.score_cap, 2 * batch_abs)))
        outputs = run_contract(session, batch)
        problems += [
            f"batch of {batch.shape[0]}: {p}"
            for p in contract_problems(outputs, len(batch), settings.max_detections)
        ]
        if problems:
            continue
        eager = wrapper.eager_detections(raw_eager, settings)
        for ref_dets, got_dets in zip(eager, Detections.from_contract(outputs), strict=True):
            references.append(ref_dets)
            actuals.append(got_dets)
            matches.append(
                match_detections(
                    ref_dets,
                    got_dets,
                    box_tol=tol.box,
                    score_tol=score_tols[-1],
                    score_threshold=settings.score_threshold,
                    iou_threshold=settings.iou_threshold,
                    max_detections=settings.max_detections,
                )
            )
    detections = summarize_matches(matches)
    raw_ok = all(r["max_rel_error"] <= tol.raw_rel for r in raw_report.values())
    det_ok = not problems and detections["unexplained"] == 0 and detections["reference"] > 0
    summary = (
        "; ".join(f"{n} rel err {r['max_rel_error']:.2e}" for n, r in raw_report.items())
        + f"; detections {detections['matched']}/{detections['reference']} matched, "
        f"{detections['unexplained']} unexplained" + ("" if not problems else f"; contract: {problems[:3]}")
    )
    if detections["reference"] == 0:
        summary += "; the eager model detected nothing, so detections were not compared"
    masks: dict[str, Any] = {}
    if wrapper.mask_size is not None:  # matched detections' masks: probabilities within tolerance
        masks = mask_errors(references, actuals, matches)
        det_ok = det_ok and masks["pairs"] > 0 and masks["max_abs_error"] <= tol.mask
        summary += f"; masks max abs err {masks['max_abs_error']:.2e} over {masks['pairs']} pairs"
    return {
        "passed": raw_ok and det_ok,
        "summary": summary,
        "runtime": _runtime_name(),
        "reference": "eager PyTorch: training's preprocessing, network, post-processing (export thresholds)",
        "batch_sizes": [int(b.shape[0]) for b in batches],
        "tolerances": asdict(tol),
        "score_tolerances_used": score_tols,
        "raw_outputs": raw_report,
        "contract": {"passed": not problems, "problems": problems},
        "detections": detections,
        **({"masks": masks} if masks else {}),
        "checked_at": utc_now(),
    }


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


def write_manifest(manifest: Manifest, directory: Path) -> None:
    """Replace ``directory/manifest.json`` atomically."""
    tmp = directory / f".{MANIFEST_FILE}.tmp"
    tmp.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    os.replace(tmp, directory / MANIFEST_FILE)


def verify_artifact(
    artifact_dir: str | Path,
    checkpoint: str | Path,
    data: str | None = None,
    split: str | None = None,
    batch_size: int = 8,
    max_images: int | None = None,
    tolerances: Tolerances | None = None,
    write: bool = True,
) -> dict[str, Any]:
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
    wrapper = get_wrapper(ckpt.model_name)(ckpt)
    check_same_model(manifest, wrapper)
    settings = settings_from_manifest(manifest, wrapper)
    report = verify_model(model, wrapper, settings, raw_names_from_manifest(manifest), tolerances=tol)
    sha = sha256_file(checkpoint)
    report["checkpoint_sha256"] = sha
    report["checkpoint_sha256_matches"] = sha == manifest.provenance.checkpoint_sha256
    if data is not None:
        from training.train import default_split

        split = split or default_split(data, "val")
        evaluators = coco_evaluators(
            {"eager": eager_detector(wrapper, settings), "onnx": onnx_detector(cpu_session(model))},
            root=data,
            split=split,
            categories=ckpt.categories,
            resize=wrapper.resize,
            batch_size=batch_size,
            max_images=max_images,
            to_original=wrapper.to_original,
        )
        metrics = {name: ev.stats for name, ev in evaluators.items()}
        stats = {name: m["bbox"] for name, m in metrics.items()}
        delta = stats["onnx"]["AP"] - stats["eager"]["AP"]
        report["coco"] = {
            "dataset": str(data),
            "split": split,
            "max_images": max_images,
            "eager_ap": stats["eager"]["AP"],
            "onnx_ap": stats["onnx"]["AP"],
            "ap_delta": delta,
            "eager": stats["eager"],
            "onnx": stats["onnx"],
        }
        report["summary"] += f"; COCO AP eager {stats['eager']['AP']:.4f} onnx {stats['onnx']['AP']:.4f}"
        display = served_display_threshold(evaluators["onnx"], data, split)
        if display is not None:
            report["display_threshold"] = display
            report["summary"] += f"; display threshold {display['threshold']:.4f} (F1 {display['f1']:.3f})"
        report["passed"] = report["passed"] and abs(delta) <= tol.ap
        if wrapper.mask_size is not None:  # mask AP of both, through the same pasting and pycocotools
            segm = {name: m.get("segm", dict.fromkeys(("AP",), 0.0)) for name, m in metrics.items()}
            segm_delta = segm["onnx"]["AP"] - segm["eager"]["AP"]
            report["coco"] |= {
                "eager_mask_ap": segm["eager"]["AP"],
                "onnx_mask_ap": segm["onnx"]["AP"],
                "mask_ap_delta": segm_delta,
                "eager_segm": segm["eager"],
                "onnx_segm": segm["onnx"],
            }
            report["summary"] += f"; mask AP eager {segm['eager']['AP']:.4f} onnx {segm['onnx']['AP']:.4f}"
            report["passed"] = report["passed"] and abs(segm_delta) <= tol.ap
    if write:
        update: dict[str, Any] = {"verification": report}
        if "display_threshold" in report:
            update["display_score_threshold"] = report["display_threshold"]["threshold"]
        if "coco" in report:
            update["metrics"] = {
                "coco_ap": report["coco"]["onnx_ap"],
                "dataset": f"{data} ({report['coco']['split']})",
                "source": "detect-export verify: this artifact in ONNX Runtime",
                "bbox": report["coco"]["onnx"],
                **({"segm": report["coco"]["onnx_segm"]} if "onnx_segm" in report["coco"] else {}),
                **({"checkpoint": manifest.metrics} if manifest.metrics else {}),
                **({"display_threshold": display} if (display := report.get("display_threshold")) else {}),
            }
        write_manifest(manifest.model_copy(update=update), artifact_dir)
    return report


def artifact_display_threshold(
    artifact_dir: str | Path,
    data: str,
    split: str | None = None,
    batch_size: int = 8,
    max_images: int | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """``detect-export display-threshold``: the artifact alone (no checkpoint), served as the service
    serves it (`exporters.served_eval`, any format the service runs here) on a COCO-format split; writes
    ``display_score_threshold`` (and ``metrics.display_threshold``)."""
    from exporters.served_eval import served_metrics

    artifact_dir = Path(artifact_dir)
    manifest, _ = read_artifact(artifact_dir)
    measured = served_metrics(artifact_dir, data, split, max_images=max_images, batch_size=batch_size)
    display = measured["display_threshold"]
    if display is None:
        raise ExportError(
            f"the model detected nothing on {data} ({measured['split']}): no threshold to choose"
        )
    display["coco_ap"] = measured["bbox"]["AP"]
    if write:
        metrics = {**manifest.metrics, "display_threshold": display}
        write_manifest(
            manifest.model_copy(update={"display_score_threshold": display["threshold"], "metrics": metrics}),
            artifact_dir,
        )
    return display

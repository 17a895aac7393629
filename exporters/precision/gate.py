"""The accuracy gate of a reduced-precision variant: its AP record against the parent's, under every CPU
class this machine can reach, and what exceeds the allowed drop.

An OpenVINO artifact is measured as the process runs it and, through `exporters.evaluation.cpu_class_eval`,
under every other class the machine reaches (``ONEDNN_MAX_CPU_ISA`` in fresh processes); the record keeps
each class's AP (`contract.manifest.Accuracy.by_isa`), and a variant that loses too much under any of them
fails. ONNX Runtime's kernels ignore the cap, so its artifacts have one figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.manifest import Accuracy, IsaAccuracy
from exporters.artifact import utc_now
from exporters.evaluation.coco_ap import APComparison
from exporters.evaluation.cpu_class_eval import (
    ClassAP,
    class_ap,
    classes_to_measure,
    measure_in_child,
    own_class,
)
from service.served import cpu_int8_instructions


def metric_ap(metrics: dict[str, Any], iou_type: str) -> float | None:
    """``metrics[iou_type]["AP"]`` of `served_metrics`' result; None where it has no such type."""
    stats = metrics.get(iou_type)
    return None if stats is None else float(stats["AP"])


def runs_by_cpu_class(runtime: str) -> bool:
    """True for a runtime whose kernels depend on the CPU class (OpenVINO on the CPU)."""
    return runtime.startswith("openvino[") and ",CPU," in runtime


def measure_by_class(
    artifact: Path,
    metrics: dict[str, Any],
    data: str,
    split: str | None,
    backend: str,
    max_images: int | None,
    classes: list[str] | None = None,
) -> list[ClassAP]:
    """The artifact's AP under each class (``classes``, default every reachable one); ``metrics`` is the
    in-process run, which stands for this process's own class. Empty for runtimes the classes do not
    change."""
    if not runs_by_cpu_class(str(metrics["runtime"])):
        return []
    own = own_class()
    measured = []
    for cpu_class in classes_to_measure(classes):
        if cpu_class == own:
            measured.append(class_ap(own, metrics))
        else:
            measured.append(measure_in_child(artifact, data, split, backend, max_images, cpu_class))
    return measured


def by_isa(
    measured: list[ClassAP], parent_box_ap: float | None, parent_mask_ap: float | None
) -> dict[str, IsaAccuracy]:
    """``Accuracy.by_isa`` from each class's figures, with deltas against the parent's."""
    return {
        m.cpu_class: IsaAccuracy(
            box_ap=m.box_ap,
            mask_ap=m.mask_ap,
            box_ap_delta=None if parent_box_ap is None else m.box_ap - parent_box_ap,
            mask_ap_delta=None if parent_mask_ap is None or m.mask_ap is None else m.mask_ap - parent_mask_ap,
            runtime=m.runtime,
            cap=m.cap,
        )
        for m in measured
    }


def accuracy_record(
    variant: dict[str, Any],
    parent: dict[str, Any],
    *,
    dataset: str,
    max_ap_drop: float | None,
    int8: bool,
    classes: list[ClassAP] | None = None,
) -> Accuracy:
    """The variant's `Accuracy` against its parent's figures on the same images."""
    ap = APComparison(
        "parent", "variant", parent["bbox"], variant["bbox"], parent.get("segm"), variant.get("segm")
    )
    runtime = str(variant["runtime"])
    parent_mask_ap = metric_ap(parent, "segm")
    return Accuracy(
        dataset=dataset,
        split=str(variant["split"]),
        images=int(variant["images"]),
        annotations_sha256=str(variant["annotations_sha256"]),
        runtime=runtime,
        box_ap=float(ap.candidate["AP"]),
        mask_ap=metric_ap(variant, "segm"),
        parent_box_ap=float(ap.reference["AP"]),
        parent_mask_ap=parent_mask_ap,
        box_ap_delta=ap.ap_delta,
        mask_ap_delta=ap.mask_ap_delta,
        max_ap_drop=max_ap_drop,
        measured_at=utc_now(),
        cpu_int8=cpu_int8_instructions() if int8 and ",CPU," in runtime else None,
        by_isa=by_isa(classes or [], float(ap.reference["AP"]), parent_mask_ap),
    )


def gate_failures(accuracy: Accuracy, max_ap_drop: float) -> list[str]:
    """What exceeds the gate, in words (empty when the variant passes): the record's own figures and
    every CPU class's."""
    rows: list[tuple[str, float | None, float | None]] = [("", accuracy.box_ap_delta, accuracy.mask_ap_delta)]
    rows += [(f" as {name}", c.box_ap_delta, c.mask_ap_delta) for name, c in accuracy.by_isa.items()]
    failures = []
    for where, box_delta, mask_delta in rows:
        for what, delta, parent in (
            ("box AP", box_delta, accuracy.parent_box_ap),
            ("mask AP", mask_delta, accuracy.parent_mask_ap),
        ):
            if delta is not None and parent is not None and -delta > max_ap_drop:
                failures.append(
                    f"{what}{where} {parent + delta:.4f} vs the parent's {parent:.4f} ({delta:+.4f})"
                )
    return failures

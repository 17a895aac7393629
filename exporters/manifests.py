"""The manifests the export commands write: one builder for a checkpoint's ONNX artifact, one for every
artifact derived from another (TensorRT engines, FP16 ONNX, INT8 and bf16 variants).

A derived artifact keeps its parent's contract (input, outputs, labels, thresholds) and training
provenance (checkpoint hash, training config); it gets its own identity, export settings, tool versions
and creation time, plus the fields its command changes (format, precision, file, batch, verification).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from contract.manifest import InputSpec, Manifest, Provenance
from exporters.artifact import tool_versions, utc_now

if TYPE_CHECKING:
    from exporters.onnx.postprocess_graph import PostprocessSettings
    from exporters.onnx.wrappers import ExportWrapper
    from training.checkpoint import Checkpoint


def provenance(
    export_settings: dict[str, Any],
    *,
    checkpoint_sha256: str | None,
    training_config: dict[str, Any],
    tools: dict[str, str] | None = None,
) -> Provenance:
    """Provenance stamped now, with the installed tool versions unless ``tools`` names them."""
    return Provenance(
        checkpoint_sha256=checkpoint_sha256,
        training_config=training_config,
        export_settings=export_settings,
        tool_versions=tool_versions() if tools is None else tools,
        created_at=utc_now(),
    )


def carried_settings(parent: Manifest, keys: Iterable[str]) -> dict[str, Any]:
    """The parent's export settings named in ``keys`` that a derived artifact records again."""
    wanted = set(keys)
    return {k: v for k, v in parent.provenance.export_settings.items() if k in wanted}


def derived_manifest(
    parent: Manifest,
    /,
    *,
    name: str,
    version: str,
    export_settings: dict[str, Any],
    tools: dict[str, str] | None = None,
    **fields: Any,
) -> Manifest:
    """``parent``'s manifest for an artifact made from it: ``fields`` replaced (format, precision, ...),
    new identity and provenance (the parent's checkpoint and training config). Validated, since
    ``model_copy`` does not validate."""
    manifest = parent.model_copy(
        update={
            "name": name,
            "version": version,
            **fields,
            "provenance": provenance(
                export_settings,
                checkpoint_sha256=parent.provenance.checkpoint_sha256,
                training_config=parent.provenance.training_config,
                tools=tools,
            ),
        }
    )
    Manifest.model_validate(manifest.model_dump())
    return manifest


def checkpoint_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's own evaluation (eager PyTorch, training post-processing), if it has one."""
    bbox = metrics.get("bbox")
    if not isinstance(bbox, dict) or "AP" not in bbox:
        return {}
    return {
        "coco_ap": float(bbox["AP"]),
        "coco_ap50": float(bbox.get("AP50", float("nan"))),
        "dataset": metrics.get("split"),
        "epoch": metrics.get("epoch"),
        "source": "checkpoint evaluation (eager PyTorch, training post-processing)",
        "bbox": {k: float(v) for k, v in bbox.items()},
        **({"segm": {k: float(v) for k, v in metrics["segm"].items()}} if "segm" in metrics else {}),
    }


def onnx_manifest(
    wrapper: ExportWrapper,
    settings: PostprocessSettings,
    ckpt: Checkpoint,
    *,
    identity: tuple[str, str],
    file: str,
    input_name: str,
    outputs: tuple[str, ...],
    max_batch_size: int,
    checkpoint_sha256: str,
    export_settings: dict[str, Any],
    verification: dict[str, Any],
) -> Manifest:
    """The manifest of a checkpoint's FP32 ONNX artifact (dynamic batch, uint8 NHWC RGB input):
    contract and preprocessing from ``wrapper``, thresholds from ``settings``, the checkpoint's metrics."""
    height, width = wrapper.input_size
    name, version = identity
    return Manifest(
        name=name,
        version=version,
        architecture=wrapper.architecture,
        backbone=wrapper.backbone,
        format="onnx",
        precision="fp32",
        file=file,
        input=InputSpec(
            name=input_name,
            height=height,
            width=width,
            resize=wrapper.resize_mode,
            color_order="RGB",
            dtype="uint8",
            layout="NHWC",
            pad_value=wrapper.pad_value,
        ),
        outputs=outputs,
        mask_size=wrapper.mask_size,
        labels=tuple(wrapper.labels()),
        score_threshold=settings.score_threshold,
        iou_threshold=settings.iou_threshold,
        max_detections=settings.max_detections,
        max_batch_size=max_batch_size,
        dynamic_batch=True,
        provenance=provenance(
            export_settings, checkpoint_sha256=checkpoint_sha256, training_config=ckpt.config
        ),
        verification=verification,
        metrics=checkpoint_metrics(ckpt.metrics),
    )

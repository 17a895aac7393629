"""Model metadata, from the manifests plus how this server runs each model."""

from __future__ import annotations

from fastapi import APIRouter

from service.http.deps import RuntimeDep
from service.runtime.loaded_model import LoadedModel
from service.schemas import BatchingInfo, ErrorBody, ModelInfo, ModelList, SelfCheckInfo

router = APIRouter(prefix="/v1/models", tags=["models"])


def model_info(model: LoadedModel, default_model: str | None) -> ModelInfo:
    m = model.manifest
    return ModelInfo(
        name=model.name,
        version=model.version,
        default=model.name == default_model,
        ready=model.ready,
        architecture=m.architecture,
        backbone=m.backbone,
        format=m.format,
        precision=m.precision,
        backend=model.backend.description if model.backend is not None else None,
        inference_precision=model.backend.inference_precision if model.backend is not None else None,
        input=m.input,
        labels=list(m.labels),
        has_masks=m.has_masks,
        score_threshold=m.score_threshold,
        display_score_threshold=m.display_score_threshold,
        iou_threshold=m.iou_threshold,
        max_detections=m.max_detections,
        artifact_max_batch_size=m.max_batch_size,
        dynamic_batch=m.dynamic_batch,
        batching=BatchingInfo(
            max_batch_size=model.batching.max_batch_size,
            max_queue_delay_ms=model.batching.max_queue_delay_s * 1000,
            max_queue_size=model.batching.max_queue_size,
        ),
        metrics=dict(m.metrics),
        parent=m.parent,
        accuracy=m.accuracy,
        self_check=(
            SelfCheckInfo.model_validate(model.self_check.to_dict()) if model.self_check is not None else None
        ),
    )


@router.get("", response_model=ModelList)
async def list_models(runtime: RuntimeDep) -> ModelList:
    """Every loaded model version."""
    return ModelList(
        default_model=runtime.default_model,
        models=[model_info(m, runtime.default_model) for m in runtime.all()],
    )


@router.get(
    "/{name}", response_model=ModelInfo, responses={404: {"model": ErrorBody}, 422: {"model": ErrorBody}}
)
async def get_model(name: str, runtime: RuntimeDep, version: str | None = None) -> ModelInfo:
    """One model: its latest loaded version, or ``?version=``."""
    return model_info(runtime.get(name, version), runtime.default_model)

"""The Open Inference Protocol's model repository extension: index, load and unload while serving.

Rollout (this service's addition, after KServe's ``canaryTrafficPercent``): ``rollout`` serves a candidate
version beside the serving one with a canary and a shadow share, ``rollout/end`` undoes both in one call.

Mounted only when ``repository_api`` is true; with API keys configured these endpoints need a key like
every other non-probe route (`service.http.auth`). Load answers once the model serves from its new version
(old versions drain in the background); a failed load answers 400 with the reason and changes nothing.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from fastapi import APIRouter, Request

from service.errors import BadRequest
from service.http.deps import ControlDep, LifecycleDep, ResourcesDep
from service.http.uploads import body_chunks
from service.v2.openapi import REPOSITORY_MODEL_PATH, optional_json_body
from service.v2.routes import ERROR_RESPONSES
from service.v2.schemas import (
    RepositoryIndexItem,
    RepositoryIndexRequest,
    RepositoryLoadRequest,
    RepositoryRequest,
    RepositoryRollout,
    RepositoryRolloutRequest,
)

router = APIRouter(prefix="/v2/repository", tags=["open inference protocol: model repository"])


# These bodies are a few small JSON fields.
MAX_BODY_BYTES = 65536


async def _optional_body(
    request: Request, resources: ResourcesDep, lifecycle: LifecycleDep, schema: type[Any]
) -> Any:
    """The JSON body as ``schema`` (an empty body: its defaults), read within the body timeouts."""
    limits = replace(resources.upload_limits, max_body_bytes=MAX_BODY_BYTES)
    body = bytearray()
    async for chunk in body_chunks(request, limits, lifecycle.closing):
        body.extend(chunk)
    try:
        return schema() if not body.strip() else schema.model_validate_json(body)
    except ValueError as exc:
        raise BadRequest(f"invalid request body: {exc}", field="body") from None


@router.post(
    "/index",
    response_model=list[RepositoryIndexItem],
    responses=ERROR_RESPONSES,
    openapi_extra=optional_json_body(RepositoryIndexRequest),
)
async def repository_index(
    request: Request, control: ControlDep, resources: ResourcesDep, lifecycle: LifecycleDep
) -> list[RepositoryIndexItem]:
    """Every model version in the repository folder, with its state (``{"ready": true}``: ready ones only)."""
    query: RepositoryIndexRequest = await _optional_body(
        request, resources, lifecycle, RepositoryIndexRequest
    )
    rows = await control.index(ready_only=query.ready)
    return [RepositoryIndexItem(name=r.name, version=r.version, state=r.state, reason=r.reason) for r in rows]


@router.post(
    "/models/{model_name}/load",
    responses=ERROR_RESPONSES,
    dependencies=REPOSITORY_MODEL_PATH,
    openapi_extra=optional_json_body(RepositoryLoadRequest),
)
async def load_model(
    request: Request, control: ControlDep, resources: ResourcesDep, lifecycle: LifecycleDep
) -> dict[str, Any]:
    """Load the model (or its new version) from the repository folder; traffic switches when it is ready."""
    body: RepositoryRequest = await _optional_body(request, resources, lifecycle, RepositoryRequest)
    if body.parameters:
        raise BadRequest(
            f"load parameters are not supported (got {sorted(body.parameters)}); put the model's files in "
            "the repository folder and load it by name",
            field="parameters",
        )
    model_name = request.path_params["model_name"]
    models = await control.load(model_name)
    return {"name": model_name, "versions": [m.version for m in models]}


@router.post(
    "/models/{model_name}/unload",
    responses=ERROR_RESPONSES,
    dependencies=REPOSITORY_MODEL_PATH,
    openapi_extra=optional_json_body(RepositoryRequest),
)
async def unload_model(
    request: Request, control: ControlDep, resources: ResourcesDep, lifecycle: LifecycleDep
) -> dict[str, Any]:
    """Stop serving the model: new requests get 404, requests already running finish."""
    await _optional_body(
        request, resources, lifecycle, RepositoryRequest
    )  # unload_dependents: no model has dependents here
    await control.unload(request.path_params["model_name"])
    return {"name": request.path_params["model_name"]}


@router.post(
    "/models/{model_name}/rollout",
    response_model=RepositoryRollout,
    responses=ERROR_RESPONSES,
    dependencies=REPOSITORY_MODEL_PATH,
    openapi_extra=optional_json_body(RepositoryRolloutRequest, required=True),
)
async def start_rollout(
    request: Request, control: ControlDep, resources: ResourcesDep, lifecycle: LifecycleDep
) -> RepositoryRollout:
    """Load version ``candidate`` beside the serving one; it answers ``canary_percent`` of the requests that
    name no version and sees a copy of ``shadow_percent`` of the serving version's (answers compared in the
    metrics, never returned). Call again to change the shares."""
    body: RepositoryRolloutRequest = await _optional_body(
        request, resources, lifecycle, RepositoryRolloutRequest
    )
    name = request.path_params["model_name"]
    plan = await control.start_rollout(name, body.candidate, body.canary_percent, body.shadow_percent)
    return RepositoryRollout(name=name, state="active", **asdict(plan))


@router.post(
    "/models/{model_name}/rollout/end",
    response_model=RepositoryRollout,
    responses=ERROR_RESPONSES,
    dependencies=REPOSITORY_MODEL_PATH,
    openapi_extra=optional_json_body(RepositoryRequest),
)
async def end_rollout(
    request: Request, control: ControlDep, resources: ResourcesDep, lifecycle: LifecycleDep
) -> RepositoryRollout:
    """Undo the rollout in one call: no canary, no shadow, the candidate unloaded; the serving version
    answers everything (to promote the candidate instead, load the model: it serves the latest version)."""
    await _optional_body(request, resources, lifecycle, RepositoryRequest)
    name = request.path_params["model_name"]
    plan = await control.end_rollout(name)
    return RepositoryRollout(name=name, state="ended", **asdict(plan))

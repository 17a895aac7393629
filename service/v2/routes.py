"""Open Inference Protocol (KServe v2) REST endpoints: server and model metadata, health, inference.

Health and readiness answer 200 for true and 400 for false, as the protocol asks (with the reason in
``error``); the native ``/health/*`` probes keep 503. Errors are ``{"error": ...}`` bodies with the
service's one status mapping (`service.http.error_responses`). Inference goes through /detect's
pipeline: the same limits, admission, batcher and metrics (`service.v2.infer`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from service.errors import BadRequest
from service.http.deps import (
    BodyReaderDep,
    LeasedModelDep,
    LifecycleDep,
    PipelineDep,
    RuntimeDep,
    SettingsDep,
)
from service.http.middleware import started_at
from service.http.uploads import disconnected
from service.runtime.loaded_model import LoadedModel
from service.runtime.model_runtime import ModelRuntime
from service.runtime.repository import version_sort_key
from service.schemas import ErrorBody
from service.v2.infer import read_request, run_inference
from service.v2.openapi import INFER_OK, INFER_REQUEST_BODY, MODEL_PATH, VERSION_PATH
from service.v2.schemas import ModelMetadata, ServerMetadata
from service.v2.signature import model_config, model_metadata
from service.v2.tensors import HEADER_LENGTH

router = APIRouter(prefix="/v2", tags=["open inference protocol"])

MODEL = "/models/{model_name}"
VERSION = "/models/{model_name}/versions/{model_version}"
# Protocol extensions this server implements (the repository one only while its endpoints are served).
EXTENSIONS = ("binary_tensor_data", "model_configuration")

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        400: "malformed request or tensor, or (readiness) not ready",
        401: "missing or invalid API key (when keys are configured)",
        404: "unknown model or version",
        408: "request body stalled or too slow",
        413: "body, image or request pixels too large",
        415: "compressed body (Content-Encoding)",
        429: "overloaded: queue full or the expected wait exceeds the deadline (Retry-After)",
        500: "inference failed for this request's batch",
        503: "model loading, server draining or memory budget full (Retry-After)",
        504: "could not start before the deadline",
    }.items()
}


class NotReady(BadRequest):
    """A readiness question answered "no" (the protocol's 4xx for false)."""


def _model(runtime: ModelRuntime, request: Request) -> LoadedModel:
    return runtime.get(request.path_params["model_name"], request.path_params.get("model_version"))


@router.get("", response_model=ServerMetadata)
async def server_metadata(request: Request, settings: SettingsDep) -> ServerMetadata:
    """Server name, version and the protocol extensions it implements."""
    extensions = [*EXTENSIONS, *(["model_repository"] if settings.repository_api else [])]
    return ServerMetadata(name="detect", version=request.app.version, extensions=extensions)


@router.get("/health/live")
async def server_live() -> dict[str, bool]:
    return {"live": True}


@router.get("/health/ready", responses=ERROR_RESPONSES)
async def server_ready(runtime: RuntimeDep, lifecycle: LifecycleDep) -> dict[str, bool]:
    """200 when every loaded model serves and the server is not draining; else 400 with the reason."""
    if lifecycle.draining:
        raise NotReady("server is draining")
    if not runtime.ready:
        waiting = {key: value for key, value in runtime.status().items() if value != "ok"}
        raise NotReady(f"not ready: {waiting or 'no model loaded'}")
    return {"ready": True}


@router.get(MODEL, response_model=ModelMetadata, responses=ERROR_RESPONSES, dependencies=MODEL_PATH)
@router.get(VERSION, response_model=ModelMetadata, responses=ERROR_RESPONSES, dependencies=VERSION_PATH)
async def get_model_metadata(request: Request, runtime: RuntimeDep) -> ModelMetadata:
    """Inputs and outputs of a model (its latest loaded version, or the one named)."""
    model = _model(runtime, request)
    return model_metadata(model, sorted(runtime.models.get(model.name, {}), key=version_sort_key))


@router.get(MODEL + "/ready", responses=ERROR_RESPONSES, dependencies=MODEL_PATH)
@router.get(VERSION + "/ready", responses=ERROR_RESPONSES, dependencies=VERSION_PATH)
async def get_model_ready(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    model = _model(runtime, request)
    if not model.ready:
        raise NotReady(f"model {model.name!r} version {model.version!r} is {model.status()}", field="model")
    return {"name": model.name, "ready": True}


@router.get(MODEL + "/config", responses=ERROR_RESPONSES, dependencies=MODEL_PATH)
@router.get(VERSION + "/config", responses=ERROR_RESPONSES, dependencies=VERSION_PATH)
async def get_model_config(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """The model's configuration in Triton's JSON form (what tritonclient and perf_analyzer read)."""
    return model_config(_model(runtime, request))


@router.post(
    MODEL + "/infer",
    responses={**INFER_OK, **ERROR_RESPONSES},
    response_class=Response,
    dependencies=MODEL_PATH,
    openapi_extra=INFER_REQUEST_BODY,
)
@router.post(
    VERSION + "/infer",
    responses={**INFER_OK, **ERROR_RESPONSES},
    response_class=Response,
    dependencies=VERSION_PATH,
    openapi_extra=INFER_REQUEST_BODY,
)
async def infer(
    request: Request,
    model: LeasedModelDep,
    pipeline: PipelineDep,
    reader: BodyReaderDep,
    settings: SettingsDep,
) -> Response:
    """Run the model on JSON or binary tensors: network-sized UINT8 images, or encoded images as BYTES."""
    async with pipeline.admit(model, started_at(request), gone=disconnected(request)) as run:
        body = await run.hold_input(read_request(request, reader))
        content, json_length = await run_inference(run, body, request.headers.get(HEADER_LENGTH), settings)
    if json_length is None:
        return Response(content, media_type="application/json")
    return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(json_length)})

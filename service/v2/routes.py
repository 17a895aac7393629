"""Open Inference Protocol (KServe v2) REST endpoints: server and model metadata, health, inference.

Health and readiness answer 200 for true and 400 for false, as the protocol asks (with the reason in
``error``); the native ``/health/*`` probes keep 503. Errors are ``{"error": ...}`` bodies with the
service's one status mapping (`service.errors`). Inference shares /detect's limits, admission, batcher
and metrics (`service.v2.infer`).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response

from service.errors import BadRequest
from service.http.deps import LeasedModelDep, LifecycleDep, ResourcesDep, RuntimeDep, SettingsDep
from service.http.uploads import cancel_on_disconnect
from service.runtime.model_runtime import LoadedModel, ModelRuntime
from service.runtime.repository import version_sort_key
from service.schemas import ErrorBody
from service.v2.infer import parse_body, read_body, run_inference
from service.v2.schemas import ModelMetadata, ServerMetadata
from service.v2.signature import model_config, model_metadata
from service.v2.tensors import HEADER_LENGTH, encode_response

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


@router.get(MODEL, response_model=ModelMetadata, responses=ERROR_RESPONSES)
@router.get(VERSION, response_model=ModelMetadata, responses=ERROR_RESPONSES)
async def get_model_metadata(request: Request, runtime: RuntimeDep) -> ModelMetadata:
    """Inputs and outputs of a model (its latest loaded version, or the one named)."""
    model = _model(runtime, request)
    return model_metadata(model, sorted(runtime.models.get(model.name, {}), key=version_sort_key))


@router.get(MODEL + "/ready", responses=ERROR_RESPONSES)
@router.get(VERSION + "/ready", responses=ERROR_RESPONSES)
async def get_model_ready(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    model = _model(runtime, request)
    if not model.ready:
        raise NotReady(f"model {model.name!r} version {model.version!r} is {model.status()}", field="model")
    return {"name": model.name, "ready": True}


@router.get(MODEL + "/config", responses=ERROR_RESPONSES)
@router.get(VERSION + "/config", responses=ERROR_RESPONSES)
async def get_model_config(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """The model's configuration in Triton's JSON form (what tritonclient and perf_analyzer read)."""
    return model_config(_model(runtime, request))


@router.post(MODEL + "/infer", responses=ERROR_RESPONSES, response_class=Response)
@router.post(VERSION + "/infer", responses=ERROR_RESPONSES, response_class=Response)
async def infer(
    request: Request,
    model: LeasedModelDep,
    settings: SettingsDep,
    resources: ResourcesDep,
    lifecycle: LifecycleDep,
) -> Response:
    """Run the model on JSON or binary tensors: network-sized UINT8 images, or encoded images as BYTES."""
    started = getattr(request.state, "started_at", time.monotonic())
    deadline = started + settings.request_timeout_ms / 1000
    model.admit(1, deadline)  # overloaded: 429 at once, before the body is read
    body = await read_body(request, resources.upload_limits, resources.body_budget, lifecycle.closing)
    try:
        decoded = await parse_body(
            model, body, request.headers.get(HEADER_LENGTH), resources, settings.max_images_per_request
        )
        model.admit(decoded.count, deadline)
        with lifecycle.admitted():
            outputs = await cancel_on_disconnect(request, run_inference(model, decoded, resources, deadline))
            content, json_length = await resources.scheduler.run(
                0, encode_response, model.name, model.version, decoded.request_id, outputs, decoded.outputs
            )
    finally:
        body.release()
    if json_length is None:
        return Response(content, media_type="application/json")
    return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(json_length)})

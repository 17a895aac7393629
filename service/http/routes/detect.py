"""POST /detect (and /v1/detect): images in, detections (JSON) or a boxed image out.

Request: multipart files in field ``images`` (or ``image`` / ``file``), or one image as the raw body.
Response: for one image a `DetectionResult`; for several ``{"results": [DetectionResult, ...]}`` in the
order sent. Mask models add each detection's mask as COCO RLE (``mask``) or, with
``mask_format=polygon``, as COCO polygons (``polygons``). With ``format=jpeg|png`` (or ``Accept:
image/jpeg|image/png``) the response is the image with its detections drawn (masks translucent under
the boxes); that needs exactly one image.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Request, Response

from service.errors import BadRequest, NotAcceptable
from service.http.deps import DetectQueryDep, LifecycleDep, ModelDep, ResourcesDep, SettingsDep
from service.http.uploads import cancel_on_disconnect, read_uploads
from service.imaging.postprocess import DetectParams, parse_class_filter
from service.imaging.render import MEDIA_TYPES
from service.pipeline.detect import (
    INLINE_PLAN_BYTES,
    ImageOutcome,
    MaskFormat,
    boxed_image,
    json_results,
    plan_images,
    run_detection,
)
from service.pipeline.timing import RequestStages
from service.runtime.admission import Resources
from service.runtime.model_runtime import LoadedModel
from service.schemas import DetectionResult, DetectionResults, ErrorBody

router = APIRouter(tags=["detect"])

OutputFormat = Literal["json", "jpeg", "png"]

_ACCEPTED: dict[str, OutputFormat] = {
    "application/json": "json",
    "application/*": "json",
    "*/*": "json",
    "image/jpeg": "jpeg",
    "image/*": "jpeg",
    "image/png": "png",
}

_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "images": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "minItems": 1,
                        },
                    },
                    "required": ["images"],
                }
            },
            "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
            "image/png": {"schema": {"type": "string", "format": "binary"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Detections in original-image pixels (one image: an object; several: results), "
        "or the boxed image",
        "model": DetectionResult | DetectionResults,
        "content": {"image/jpeg": {}, "image/png": {}},
        "headers": {
            "Server-Timing": {
                "description": "this request's milliseconds per stage: decode, preprocess, queue_wait, "
                "inference, postprocess, encode (JSON) or render (image), total",
                "schema": {"type": "string"},
            }
        },
    },
    **{
        code: {"model": ErrorBody, "description": text}
        for code, text in {
            400: "bad image or parameter",
            401: "missing or invalid API key (when keys are configured)",
            404: "unknown model or version",
            406: "cannot produce the Accept media type",
            408: "request body stalled or too slow",
            413: "body, image or request pixels too large",
            415: "wrong Content-Type",
            422: "invalid query parameter",
            429: "overloaded: queue full or the expected wait exceeds the deadline (Retry-After)",
            500: "inference failed for this request's batch",
            503: "loading, draining or memory budget full (Retry-After)",
            504: "could not start before the deadline",
        }.items()
    },
}


def choose_format(requested: OutputFormat | None, accept: str | None) -> OutputFormat:
    """``format`` wins; else the first Accept media type (by q) the endpoint can produce; else json."""
    if requested is not None:
        return requested
    if not accept:
        return "json"
    ranked: list[tuple[float, int, str]] = []
    for position, entry in enumerate(accept.split(",")):
        media_type, *params = (piece.strip() for piece in entry.split(";"))
        quality = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    quality = float(param[2:])
                except ValueError:
                    quality = 0.0
        if quality > 0:
            ranked.append((-quality, position, media_type.lower()))
    for _, _, media_type in sorted(ranked):
        if media_type in _ACCEPTED:
            return _ACCEPTED[media_type]
    raise NotAcceptable(
        f"cannot produce any of Accept: {accept!r}; available: application/json, image/jpeg, image/png",
        field="accept",
    )


@router.post("/detect", responses=_RESPONSES, openapi_extra=_REQUEST_BODY, response_class=Response)
@router.post("/v1/detect", responses=_RESPONSES, openapi_extra=_REQUEST_BODY, response_class=Response)
async def detect(
    request: Request,
    query: DetectQueryDep,
    model: ModelDep,
    settings: SettingsDep,
    resources: ResourcesDep,
    lifecycle: LifecycleDep,
) -> Response:
    """Detect objects in one or several images."""
    fmt = choose_format(query.format, request.headers.get("accept"))
    params = DetectParams(
        query.score_threshold, query.max_detections, parse_class_filter(query.classes, model.manifest.labels)
    )
    started = getattr(request.state, "started_at", time.monotonic())
    deadline = started + settings.request_timeout_ms / 1000
    model.admit(1, deadline)  # overloaded: 429 at once, before the body is read
    uploads = await read_uploads(request, resources.upload_limits, resources.body_budget, lifecycle.closing)
    outcomes: list[ImageOutcome] = []
    stages = RequestStages(model.metrics)
    try:
        if fmt != "json" and len(uploads.images) > 1:
            raise BadRequest(
                f"format {fmt!r} returns one boxed image; got {len(uploads.images)} images (send one, or "
                "ask for json)",
                field="format",
            )
        keep_original = fmt != "json"
        if sum(len(upload.data) for upload in uploads.images) <= INLINE_PLAN_BYTES:
            plans = plan_images(model, uploads.images, resources, keep_original)
        else:
            plans = await resources.scheduler.run(
                0, plan_images, model, uploads.images, resources, keep_original
            )
        model.admit(len(plans), deadline)
        with lifecycle.admitted():
            outcomes = await cancel_on_disconnect(
                request,
                run_detection(
                    model,
                    uploads.images,
                    plans,
                    params,
                    resources=resources,
                    keep_original=keep_original,
                    deadline=deadline,
                    stages=stages,
                ),
            )
            uploads.release()
            response = await _respond(model, outcomes, fmt, query.mask_format, resources, stages)
            response.headers["Server-Timing"] = stages.server_timing(time.monotonic() - started)
            return response
    finally:
        uploads.release()
        for outcome in outcomes:
            outcome.release()


async def _respond(
    model: LoadedModel,
    outcomes: list[ImageOutcome],
    fmt: OutputFormat,
    mask_format: MaskFormat,
    resources: Resources,
    stages: RequestStages,
) -> Response:
    if fmt == "jpeg" or fmt == "png":
        data = await boxed_image(model, outcomes[0], fmt, resources, stages)
        headers = {
            "X-Model": model.name,
            "X-Model-Version": model.version,
            "X-Detections": str(len(outcomes[0].detections)),
        }
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)
    results = await json_results(model, outcomes, resources, mask_format, stages)
    body: DetectionResult | DetectionResults = (
        results[0] if len(results) == 1 else DetectionResults(results=results)
    )
    return Response(body.model_dump_json(exclude_none=True), media_type="application/json")

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

from service.deps import DetectQueryDep, ExecutorDep, ModelDep, SettingsDep
from service.errors import BadRequest, NotAcceptable
from service.pipeline import boxed_image, json_results, run_detection
from service.postprocess import DetectParams, parse_class_filter
from service.render import MEDIA_TYPES
from service.schemas import DetectionResult, DetectionResults, ErrorBody
from service.uploads import cancel_on_disconnect, read_uploads

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
                        "images": {"type": "array", "items": {"type": "string", "format": "binary"}},
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
    },
    **{
        code: {"model": ErrorBody, "description": text}
        for code, text in {
            400: "bad image or parameter",
            404: "unknown model or version",
            413: "body or image too large",
            415: "wrong Content-Type",
            429: "queue full (Retry-After)",
            503: "loading or draining (Retry-After)",
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
    request: Request, query: DetectQueryDep, model: ModelDep, settings: SettingsDep, executor: ExecutorDep
) -> Response:
    """Detect objects in one or several images."""
    fmt = choose_format(query.format, request.headers.get("accept"))
    params = DetectParams(
        query.score_threshold, query.max_detections, parse_class_filter(query.classes, model.manifest.labels)
    )
    started = getattr(request.state, "started_at", time.monotonic())
    uploads = await read_uploads(
        request, max_body_bytes=settings.max_body_bytes, max_images=settings.max_images_per_request
    )
    if fmt != "json" and len(uploads) > 1:
        raise BadRequest(
            f"format {fmt!r} returns one boxed image; got {len(uploads)} images (send one, or ask for json)",
            field="format",
        )
    outcomes = await cancel_on_disconnect(
        request,
        run_detection(
            model,
            uploads,
            params,
            executor=executor,
            max_pixels=settings.max_image_pixels,
            deadline=started + settings.request_timeout_ms / 1000,
        ),
    )
    if fmt == "jpeg" or fmt == "png":
        data = await boxed_image(model, outcomes[0], fmt, executor)
        headers = {
            "X-Model": model.name,
            "X-Model-Version": model.version,
            "X-Detections": str(len(outcomes[0].detections)),
        }
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)
    results = await json_results(model, outcomes, executor, query.mask_format)
    body: DetectionResult | DetectionResults = (
        results[0] if len(results) == 1 else DetectionResults(results=results)
    )
    return Response(body.model_dump_json(exclude_none=True), media_type="application/json")

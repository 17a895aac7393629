"""POST /detect (and /v1/detect): images in, detections (JSON) or a boxed image out.

Request: multipart files in field ``images`` (or ``image`` / ``file``), or one image as the raw body.
Response: for one image a `DetectionResult`; for several ``{"results": [DetectionResult, ...]}`` in the
order sent. Mask models add each detection's mask as COCO RLE (``mask``) or, with
``mask_format=polygon``, as COCO polygons (``polygons``). With ``format=jpeg|png`` (or ``Accept:
image/jpeg|image/png``) the response is the image with its detections drawn (masks translucent under
the boxes); that needs exactly one image.

A video file (MP4, MOV, MKV, WebM: a ``video/*`` body, or a body or multipart file that starts like one) is
answered while it decodes (`service.video.job`): NDJSON (``application/x-ndjson``), one `VideoFrameResult`
line per processed frame and a last `VideoSummary` line, or with ``format=mp4`` (or ``Accept: video/mp4``)
the video with boxes and track ids drawn. ``fps``, ``max_frames``, ``track``, ``detect_every`` and
``detect_budget`` apply to videos only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, cast

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from service.errors import BadRequest, NotAcceptable
from service.http.deps import (
    BodyReaderDep,
    DetectQueryDep,
    ModelDep,
    PipelineDep,
    ResourcesDep,
    SettingsDep,
)
from service.http.middleware import started_at
from service.http.tiling_options import tiling_options
from service.http.uploads import IMAGE_FIELDS, RAW_MEDIA_TYPES, disconnected, is_video_body
from service.imaging.postprocess import DetectParams, parse_class_filter
from service.imaging.render import MEDIA_TYPES
from service.pipeline.entry import BoxedImage, DetectOptions, OutputFormat, PipelineRequest
from service.pipeline.inputs import ImageUpload
from service.runtime.admission import Resources
from service.runtime.loaded_model import LoadedModel
from service.schemas import DetectionResult, DetectionResults, DetectQuery, ErrorBody
from service.settings import Settings
from service.video.decoding import VIDEO_MEDIA_TYPES, looks_like_video
from service.video.job import VideoConfig, VideoFormat, VideoOptions, video_job

router = APIRouter(tags=["detect"])

_ACCEPTED: dict[str, OutputFormat] = {
    "application/json": "json",
    "application/*": "json",
    "*/*": "json",
    "image/jpeg": "jpeg",
    "image/*": "jpeg",
    "image/png": "png",
}

_IMAGE_FILE: dict[str, Any] = {"type": "string", "format": "binary"}
_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "JPEG, PNG, BMP or WebP images: multipart files (at most `max_images_per_request`, in "
        "any of the fields), or one image as the whole body; or one video (MP4, MOV, MKV, WebM) as the "
        "body (up to video_max_bytes) or a multipart file (up to max_body_bytes)",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "images": {"type": "array", "items": _IMAGE_FILE, "minItems": 1},
                        "image": _IMAGE_FILE,
                        "file": _IMAGE_FILE,
                    },
                    # Any other field is refused (parameters go in the query string).
                    "additionalProperties": False,
                    "anyOf": [{"required": [name]} for name in IMAGE_FIELDS],
                }
            },
            **{
                media_type: {"schema": _IMAGE_FILE}
                for media_type in (
                    "image/jpeg",
                    "image/png",
                    "image/bmp",
                    "image/webp",
                    *VIDEO_MEDIA_TYPES,
                    *RAW_MEDIA_TYPES,
                )
            },
        },
    }
}

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Detections in original-image pixels (one image: an object; several: results), "
        "or the boxed image; for a video, NDJSON lines (VideoFrameResult per processed frame, then a "
        "VideoSummary; an error after the first line ends the body with an {error, field, status} line) "
        "or the boxed MP4",
        "model": DetectionResult | DetectionResults,
        "content": {"image/jpeg": {}, "image/png": {}, "application/x-ndjson": {}, "video/mp4": {}},
        "headers": {
            "Server-Timing": {
                "description": "this request's milliseconds per stage: decode, preprocess, queue_wait, "
                "inference, postprocess, encode (JSON) or render (image), total",
                "schema": {"type": "string"},
            },
            "X-Served-By": {
                "description": "boxed images and videos: name:version of the fp32 parent that computed the "
                "answer in the place of a variant that failed its self-check at load (JSON: `served_by`)",
                "schema": {"type": "string"},
            },
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
    pipeline: PipelineDep,
    reader: BodyReaderDep,
    settings: SettingsDep,
    resources: ResourcesDep,
) -> Response:
    """Detect objects in one or several images (large ones in tiles, with ``tiling``), or in the frames
    of a video, with track ids."""
    accept = request.headers.get("accept")
    video = is_video_body(request)
    # An image's answer format is checked before its body is read; one that only a video can have (mp4)
    # waits for the body, which may be a video after all (a multipart file, an octet-stream body).
    maybe_video = video or query.format == "mp4" or "video/mp4" in (accept or "")
    fmt = None if maybe_video else _image_format(query.format, accept)
    params = DetectParams(
        query.score_threshold, query.max_detections, parse_class_filter(query.classes, model.manifest.labels)
    )
    tiling = tiling_options(settings, model.serving.tiling, query.tiling, query.tile_overlap)
    async with AsyncExitStack() as owned:
        run = await owned.enter_async_context(
            pipeline.admit(model, started_at(request), gone=disconnected(request))
        )
        images = await run.hold_input(reader.images(request, settings.video_max_bytes))
        if video or (len(images) == 1 and looks_like_video(images[0].data)):
            video_options = VideoOptions(
                params,
                _video_format(query, accept),
                query.fps,
                query.max_frames,
                query.track,
                query.detect_every,
                query.detect_budget,
            )
            return await _video_response(run, images[0], video_options, settings, resources, owned)
        fmt = fmt or _image_format(query.format, accept)
        options = DetectOptions(params, fmt, query.mask_format, tiling, query.tile_grid)
        response = _response(model, await run.detect(images, options))
        response.headers["Server-Timing"] = run.server_timing()
        return response


def _image_format(requested: str | None, accept: str | None) -> OutputFormat:
    if requested == "mp4":
        raise BadRequest("format 'mp4' is for a video; an image answers json, jpeg or png", field="format")
    return choose_format(cast(OutputFormat | None, requested), accept)


def _video_format(query: DetectQuery, accept: str | None) -> VideoFormat:
    if query.format in ("jpeg", "png"):
        raise BadRequest(
            f"format {query.format!r} is for an image; a video answers json (NDJSON lines) or mp4",
            field="format",
        )
    if query.format == "mp4" or (query.format is None and accept and "video/mp4" in accept):
        return "mp4"
    return "ndjson"


async def _video_response(
    run: PipelineRequest,
    upload: ImageUpload,
    options: VideoOptions,
    settings: Settings,
    resources: Resources,
    owned: AsyncExitStack,
) -> Response:
    """The streamed answer for a video; it owns what the request holds (``owned``) until it ends."""
    job = await owned.enter_async_context(
        video_job(run, upload.data, options, VideoConfig.from_settings(settings), resources)
    )
    owned.enter_context(run.model.lease())  # the version serves until the last frame, even if swapped
    headers = _model_headers(run.model)
    body = _owned_body(job.body(), owned.pop_all())
    return StreamingResponse(body, media_type=job.media_type, headers=headers)


async def _owned_body(body: AsyncIterator[bytes], owned: AsyncExitStack) -> AsyncIterator[bytes]:
    async with owned:
        async for chunk in body:
            yield chunk


def _response(model: LoadedModel, output: list[DetectionResult] | BoxedImage) -> Response:
    if isinstance(output, BoxedImage):
        headers = {**_model_headers(model), "X-Detections": str(output.detections)}
        return Response(output.data, media_type=MEDIA_TYPES[output.format], headers=headers)
    body = output[0] if len(output) == 1 else DetectionResults(results=output)
    return Response(body.model_dump_json(exclude_none=True), media_type="application/json")


def _model_headers(model: LoadedModel) -> dict[str, str]:
    """Which version answered; ``X-Served-By``: the fp32 parent computing in its place (self-check)."""
    headers = {"X-Model": model.name, "X-Model-Version": model.version}
    if model.served_by is not None:
        headers["X-Served-By"] = model.served_by
    return headers

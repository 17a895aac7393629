"""Camera and stream sessions (docs/streams.md), behind the API key when keys are set.

Routes parse, call the session owner (`service.streams.manager.StreamManager`) and respond; with
``DETECT_STREAM_SOURCES`` empty every route answers 403.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import StreamingResponse

from service.errors import QueueFull, ServiceUnavailable
from service.http.deps import ResourcesDep, StreamsDep
from service.schemas import ErrorBody
from service.streams.events import EventHub
from service.streams.schemas import StreamCreated, StreamInfo, StreamList, StreamRequest

router = APIRouter(
    prefix="/v1/streams",
    tags=["streams"],
    responses={403: {"model": ErrorBody}, 404: {"model": ErrorBody}},
)


@router.post("", status_code=201, response_model=StreamCreated, responses={400: {"model": ErrorBody}})
async def create_stream(body: StreamRequest, streams: StreamsDep) -> StreamCreated:
    """Open a stream: its session starts reading (state ``starting``, then ``running``)."""
    return StreamCreated(id=streams.create(body).id)


@router.get("", response_model=StreamList)
async def list_streams(streams: StreamsDep) -> StreamList:
    """Every session: state, input and processed fps, dropped frames, lag, reconnects, last error."""
    return StreamList(streams=[session.info() for session in streams.all()])


@router.get("/{stream_id}", response_model=StreamInfo)
async def get_stream(stream_id: str, streams: StreamsDep) -> StreamInfo:
    return streams.get(stream_id).info()


@router.delete("/{stream_id}", status_code=204)
async def delete_stream(stream_id: str, streams: StreamsDep) -> Response:
    """Stop the session (its reader thread and task) and forget it."""
    await streams.delete(stream_id)
    return Response(status_code=204)


def _answer_405_with_every_method(path: str, allowed: tuple[str, ...]) -> None:
    """Two routes share ``path`` (one per method): Starlette's 405 would name only the first one's methods
    in ``Allow``; this route answers the other methods with all of them."""

    async def method_not_allowed() -> Response:
        raise HTTPException(405, "Method Not Allowed", headers={"Allow": ", ".join(allowed)})

    others = [m for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS") if m not in allowed]
    router.add_api_route(path, method_not_allowed, methods=others, include_in_schema=False)


_answer_405_with_every_method("", ("GET", "POST"))
_answer_405_with_every_method("/{stream_id}", ("GET", "DELETE"))


@router.get(
    "/{stream_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, 429: {"model": ErrorBody}},
)
async def stream_events(stream_id: str, streams: StreamsDep) -> StreamingResponse:
    """Server-Sent Events: one ``frame`` event per processed frame (detections with track ids), ``end``
    when the session stops."""
    hub = streams.get(stream_id).events
    if hub.subscribers >= hub.max_subscribers:
        raise QueueFull(
            f"stream {stream_id!r} has {hub.subscribers} event clients (stream_max_subscribers); retry later",
            retry_after_s=5,
        )
    return StreamingResponse(
        _events(hub),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(hub: EventHub) -> AsyncIterator[str]:
    try:
        async with hub.subscribe() as events:
            async for chunk in events:
                yield chunk
    except QueueFull as exc:  # lost a race for the last place
        yield f"event: error\ndata: {exc.message}\n\n"


@router.get(
    "/{stream_id}/snapshot.jpg",
    response_class=Response,
    responses={200: {"content": {"image/jpeg": {}}}, 503: {"model": ErrorBody}},
)
async def stream_snapshot(stream_id: str, streams: StreamsDep, resources: ResourcesDep) -> Response:
    """The last processed frame with its boxes, labels and track ids drawn."""
    session = streams.get(stream_id)
    data = await resources.scheduler.run(0, session.snapshot_jpeg)
    if data is None:
        raise ServiceUnavailable(
            f"stream {stream_id!r} has no processed frame yet (state {session.current_state})",
            retry_after_s=1,
        )
    return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

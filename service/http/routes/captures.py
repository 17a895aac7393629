"""Sample capture: what is kept, and the dataset as a tar archive (behind the API key when keys are set)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from service.errors import NotFound
from service.http.deps import CaptureDep
from service.schemas import CaptureSummary, ErrorBody

router = APIRouter(prefix="/v1/captures", tags=["captures"])


@router.get("", response_model=CaptureSummary)
async def list_captures(capture: CaptureDep) -> CaptureSummary:
    """Images kept by sample capture: counts by reason, bytes, the capture's state (docs/capture.md)."""
    return capture.summary()


@router.get(
    "/archive",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}}}, 404: {"model": ErrorBody}},
)
async def download_captures(capture: CaptureDep) -> StreamingResponse:
    """The captured COCO dataset as a tar stream: annotations/instances_captured.json and captured/*."""
    if capture.store is None:
        raise NotFound("sample capture is off (DETECT_CAPTURE_DIR is not set)", field="capture")
    return StreamingResponse(
        capture.store.archive(),  # a sync iterator: Starlette runs it in a worker thread
        media_type="application/x-tar",
        headers={"Content-Disposition": 'attachment; filename="captures.tar"'},
    )

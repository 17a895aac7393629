"""What the /v1/streams endpoints take and answer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from service.streams.state import State

STREAM_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class StreamRequest(BaseModel):
    """A stream to open. ``fps`` defaults to the server's ``stream_fps`` and may not exceed
    ``stream_max_fps``; ``classes`` and ``score_threshold`` filter detections as in /detect."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2048, description="rtsp://, rtsps://, http:// or https://")
    model: str | None = Field(default=None, description="the model; default: the server's default model")
    fps: float | None = Field(default=None, gt=0, description="frames processed per second, at most")
    classes: str | None = Field(default=None, max_length=1024, description='e.g. "person, car" or "1,3"')
    score_threshold: float | None = Field(default=None, ge=0, le=1)


class DeclaredStream(StreamRequest):
    """A stream of the settings file (``streams_file``), with its fixed id."""

    id: str = Field(pattern=STREAM_ID_PATTERN)


class StreamCreated(BaseModel):
    id: str


class StreamInfo(BaseModel):
    """A session as `GET /v1/streams` reports it."""

    id: str
    url: str
    model: str
    state: State
    state_since: float = Field(description="Unix time of the last state change")
    last_error: str | None = Field(description="why the source failed last (reconnecting, error)")
    fps: float = Field(description="frames per second the session processes at most")
    input_fps: float = Field(description="frames per second decoded from the source (over the last 2 s)")
    processed_fps: float = Field(description="frames per second answered, detected or predicted (last 2 s)")
    detected_fps: float = Field(description="frames per second the detector ran on (over the last 2 s)")
    predicted_fps: float = Field(description="frames per second answered by the tracker (over the last 2 s)")
    dropped_fps: float = Field(description="frames per second dropped, any reason (over the last 2 s)")
    frames_read: int
    frames_processed: int = Field(description="frames answered with an event (detected + predicted)")
    frames_detected: int
    frames_predicted: int
    frames_skipped: int = Field(description="decoded but over the session's fps (never converted)")
    dropped_frames: int = Field(
        description="frames replaced before taken (stale), or whose detection was dropped (shed, expired, "
        "unavailable, corrupt: those are still answered by the tracker)"
    )
    frames_since_detection_max: int = Field(description="longest run of predicted frames, last 256 answers")
    motion: float = Field(description="motion score of the latest frame: share of it that changed, 0..1")
    lag_ms_p50: float | None = Field(description="capture to event, over the last frames")
    lag_ms_p99: float | None
    reconnects: int
    active_tracks: int
    width: int | None = Field(description="the frames' size as processed (scaled to stream_max_pixels)")
    height: int | None
    subscribers: int = Field(description="Server-Sent Events clients")
    declared: bool = Field(description="from the settings file: kept while the server runs")


class StreamList(BaseModel):
    streams: list[StreamInfo]

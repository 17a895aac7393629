"""One video request: decode -> the pipeline entry's `detect_frames` (the model's batcher) -> tracks ->
NDJSON lines or an MP4 with boxes drawn, produced while the video decodes.

::

    async with video_job(run, data, options, config, resources) as job:  # errors here: a clean 4xx/5xx
        async for chunk in job.body():  # errors here end the body with an NDJSON error line
            ...

Entering opens the file, checks its frame size, holds the request's working set in the image memory
budget (`working_set`) and decodes the first frames, so a bad file is answered with its HTTP status
before anything is sent. Frames are decoded in worker threads ``frames_in_flight`` at a time, the next
group while the model runs the current one, and queued together so they can share a batch.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np

from contract.manifest import Label
from service.errors import BadRequest, ServiceError
from service.imaging.masks import PastedMask, paste_mask
from service.imaging.postprocess import DetectParams, KeptDetections, to_schema
from service.imaging.render import draw_detections
from service.pipeline.detect import ImageOutcome
from service.pipeline.entry import PipelineRequest
from service.runtime.admission import RENDER_BYTES_PER_PIXEL, Resources
from service.schemas import TrackedDetection, VideoFrameResult, VideoSummary
from service.settings import Settings
from service.video.decoding import DECODER_BYTES_PER_PIXEL, Frame, VideoLimits, VideoReader
from service.video.encoding import ENCODER_BYTES_PER_PIXEL, Mp4Writer
from service.video.prediction import TrackPredictor
from service.video.tracking import Tracker, TrackerConfig

VideoFormat = Literal["ndjson", "mp4"]
MEDIA_TYPES: dict[VideoFormat, str] = {"ndjson": "application/x-ndjson", "mp4": "video/mp4"}
FRAME_BYTES_PER_PIXEL = 3  # a decoded RGB frame waiting for, or in, the model
# What a video costs whatever its size: FFmpeg's demuxer, decoder and (MP4) encoder contexts and buffers
# (scripts/profiling/measure_video_memory.py: ~16 MiB at 640x480 beyond the per-pixel part).
VIDEO_FIXED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class VideoConfig:
    """The server's video limits (`Settings` ``video_*``)."""

    limits: VideoLimits
    max_frames: int
    frames_in_flight: int
    track_lost_s: float
    predict_max_frames: int = 30

    @classmethod
    def from_settings(cls, settings: Settings) -> VideoConfig:
        limits = VideoLimits(
            settings.video_max_pixels, settings.video_max_read_frames, settings.video_max_duration_s
        )
        return cls(
            limits,
            settings.video_max_frames,
            settings.video_frames_in_flight,
            settings.video_track_lost_s,
            settings.video_predict_max_frames,
        )


@dataclass(frozen=True)
class VideoOptions:
    """What a video request asks for."""

    params: DetectParams
    format: VideoFormat = "ndjson"
    fps: float | None = None
    max_frames: int | None = None
    track: bool = True
    detect_every: int = 1  # the detector runs on every K-th processed frame; the tracker fills the rest
    detect_budget: float | None = None  # or on at most this many frames per second of video, evenly spaced

    def __post_init__(self) -> None:
        budget = self.detect_budget
        if budget is not None and self.detect_every > 1:
            raise BadRequest("give detect_every or detect_budget, not both", field="detect_budget")
        if budget is not None and not (math.isfinite(budget) and budget > 0):
            raise BadRequest(f"detect_budget must be a number > 0, got {budget!r}", field="detect_budget")
        for name, sparse in (("detect_every", self.detect_every > 1), ("detect_budget", budget is not None)):
            if sparse and not self.track:
                raise BadRequest(
                    f"{name} needs track: the frames in between are answered by the tracker", field=name
                )


@dataclass(frozen=True)
class FrameAnswer:
    """One processed frame's answer: the detector's boxes, or the tracks advanced to it."""

    frame: Frame
    detections: KeptDetections
    track_ids: np.ndarray  # int64 [N], -1: no id
    width: int
    height: int
    masks: np.ndarray | None = None  # float32 [N, Mh, Mw] (mask models, detected frames)
    image: np.ndarray | None = None  # RGB, kept to draw (mp4)
    frames_since_detection: int = 0

    @property
    def source(self) -> Literal["detected", "predicted"]:
        return "predicted" if self.frames_since_detection else "detected"


def working_set(pixels: int, frames_in_flight: int, fmt: VideoFormat) -> int:
    """Bytes a video of ``pixels``-pixel frames holds in the image budget for its whole run: the decoder,
    two groups of frames (one decoding, one in the model), for MP4 the drawing and the encoder, and a
    fixed part for FFmpeg's contexts (measured: scripts/profiling/measure_video_memory.py)."""
    per_pixel = DECODER_BYTES_PER_PIXEL + 2 * frames_in_flight * FRAME_BYTES_PER_PIXEL
    if fmt == "mp4":
        per_pixel += RENDER_BYTES_PER_PIXEL + ENCODER_BYTES_PER_PIXEL
    return VIDEO_FIXED_BYTES + int(pixels * per_pixel)


Group = tuple[list[Frame], ServiceError | None]


def _take(video: VideoReader, frames: Iterator[Frame], count: int) -> Group:
    """Up to ``count`` more frames (blocking: decodes), and the error that stopped decoding, if any: the
    frames decoded before damaged data are still answered."""
    group: list[Frame] = []
    with video.lock:
        try:
            for frame in frames:
                group.append(frame)
                if len(group) == count:
                    break
        except ServiceError as err:
            return group, err
    return group, None


def _draw(answers: list[FrameAnswer], labels: tuple[Label, ...], mp4: Mp4Writer) -> bytes:
    for answer in answers:
        assert answer.image is not None, "frames are kept to draw on"
        found = answer.detections
        pasted: Iterator[PastedMask] | None = None
        if answer.masks is not None:  # pasted lazily, one at a time, as they are drawn
            pasted = (
                paste_mask(mask, box, answer.height, answer.width)
                for mask, box in zip(answer.masks, found.boxes, strict=True)
            )
        ids = answer.track_ids.tolist()
        mp4.add(draw_detections(answer.image, found, labels, pasted, track_ids=ids))
    return mp4.take()


class VideoJob:
    """An entered `video_job`: `body` produces the answer."""

    def __init__(
        self,
        run: PipelineRequest,
        video: VideoReader,
        options: VideoOptions,
        config: VideoConfig,
        resources: Resources,
    ):
        self.run = run
        self.video = video
        self.options = options
        self.config = config
        self.media_type = MEDIA_TYPES[options.format]
        self._resources = resources
        rates = [rate for rate in (options.fps, video.info.fps) if rate]
        # Frames processed per second of video: the asked rate, never more than the video's own.
        self.fps = min(rates) if rates else 30.0
        lost_s = config.track_lost_s
        # Skipping frames: new tracks start with the velocity of their first two detections.
        # The share of processed frames the detector sees (detect_budget: detections per second of video).
        self._share = 1.0 if options.detect_budget is None else min(1.0, options.detect_budget / self.fps)
        sparse = options.detect_every > 1 or self._share < 1.0
        tracking = TrackerConfig.for_fps(self.fps, lost_s, start_velocity=sparse)
        self.tracker = Tracker(tracking) if options.track else None
        self._predictor = (
            None if self.tracker is None else TrackPredictor(self.tracker, config.predict_max_frames)
        )
        limit = (
            config.max_frames if options.max_frames is None else min(options.max_frames, config.max_frames)
        )
        self._frames = video.frames(options.fps, limit)
        self._pixels = video.info.pixels * config.frames_in_flight
        self._next: asyncio.Task[Group] | None = None
        self.processed = 0
        self.detected = 0

    async def first(self) -> None:
        """Decode the first group of frames (errors are still the request's HTTP answer)."""
        self._decode_next()
        assert self._next is not None
        group, error = await asyncio.shield(self._next)
        if error is not None and not group:
            raise error
        if not group:
            raise BadRequest(
                f"video: no frame to process ({self.video.read} decoded; its header claims "
                f"{self.video.info.claimed_frames or 0})",
                field="video",
            )

    def _decode_next(self) -> None:
        count = self.config.frames_in_flight
        work = self._resources.scheduler.run(self._pixels, _take, self.video, self._frames, count)
        self._next = asyncio.ensure_future(work)

    async def _groups(self) -> AsyncIterator[list[FrameAnswer]]:
        keep = self.options.format == "mp4"
        while self._next is not None:
            group, error = await self._next
            self._next = None
            if not group:
                if error is not None:
                    raise error
                return
            if error is None:
                self._decode_next()  # the next group decodes while the model runs this one
            positions = range(self.processed, self.processed + len(group))
            detect = [frame for frame, at in zip(group, positions, strict=True) if self._chosen(at)]
            outcomes = iter(
                await self.run.detect_frames(
                    [frame.image for frame in detect],
                    self.options.params,
                    labels=[f"frame {frame.index}" for frame in detect],
                    keep_frames=keep,
                )
                if detect
                else []
            )
            answers = [
                self._detected(frame, at, next(outcomes)) if self._chosen(at) else self._predicted(frame, at)
                for frame, at in zip(group, positions, strict=True)
            ]
            self.processed += len(group)
            self.detected += len(detect)
            yield answers
            if error is not None:
                raise error  # after the frames decoded before it

    def _chosen(self, position: int) -> bool:
        """Whether the processed frame at ``position`` goes to the detector: every ``detect_every``-th; with
        ``detect_budget``, the frame where the detections owed (position x share) pass a whole number."""
        if self.options.detect_budget is None:
            return position % self.options.detect_every == 0
        owed = position * self._share + 1e-9  # 1e-9: 5 x 0.4 is 2 even in floating point
        return position == 0 or math.floor(owed) > math.floor(owed - self._share)

    def _detected(self, frame: Frame, position: int, outcome: ImageOutcome) -> FrameAnswer:
        found = outcome.detections
        if self._predictor is None:
            ids = np.full(len(found), -1, dtype=np.int64)
        else:
            ids = self._predictor.detected(float(position), found)
        return FrameAnswer(frame, found, ids, outcome.width, outcome.height, outcome.masks, outcome.image)

    def _predicted(self, frame: Frame, position: int) -> FrameAnswer:
        assert self._predictor is not None, "frames in between need the tracker (VideoOptions)"
        height, width = frame.image.shape[:2]
        carried = self._predictor.predicted(float(position), (width, height))
        image = frame.image if self.options.format == "mp4" else None
        since = carried.frames_since_detection
        return FrameAnswer(
            frame, carried.as_detections(), carried.track_ids, width, height, None, image, since
        )

    async def body(self) -> AsyncIterator[bytes]:
        """The answer, chunk by chunk. An error after the first chunk ends it with an NDJSON error line
        (``{"error": ..., "field": ...}``) or, for MP4, a truncated file."""
        try:
            if self.options.format == "mp4":
                async for chunk in self._mp4():
                    yield chunk
            else:
                async for chunk in self._ndjson():
                    yield chunk
        except ServiceError as err:
            if self.options.format == "ndjson":
                yield _line({"error": err.message, "field": err.field, "status": err.status_code})
        finally:
            await self._stop_decoding()

    async def _ndjson(self) -> AsyncIterator[bytes]:
        labels = self.run.model.manifest.labels
        async for answers in self._groups():
            lines = []
            for answer in answers:
                detections = [
                    TrackedDetection(**d.model_dump(), track_id=int(t) if t >= 0 else None)
                    for d, t in zip(to_schema(answer.detections, labels), answer.track_ids, strict=True)
                ]
                result = VideoFrameResult(
                    frame=answer.frame.index,
                    pts=round(answer.frame.pts, 6),
                    width=answer.width,
                    height=answer.height,
                    source=answer.source,
                    frames_since_detection=answer.frames_since_detection,
                    detections=detections,
                )
                lines.append(result.model_dump_json(exclude_none=True).encode() + b"\n")
            yield b"".join(lines)
        yield self.summary().model_dump_json().encode() + b"\n"

    async def _mp4(self) -> AsyncIterator[bytes]:
        info = self.video.info
        labels = self.run.model.manifest.labels
        scheduler = self._resources.scheduler
        with Mp4Writer(info.width, info.height, self.fps) as mp4:
            async for answers in self._groups():
                chunk = await scheduler.run(self._pixels, _draw, answers, labels, mp4)
                if chunk:
                    yield chunk
            await scheduler.run(0, mp4.close)
            yield mp4.take()

    def summary(self) -> VideoSummary:
        info, video = self.video.info, self.video
        return VideoSummary(
            model=self.run.model.name,
            version=self.run.model.version,
            codec=info.codec,
            container=info.container,
            fps=info.fps,
            claimed_frames=info.claimed_frames,
            claimed_duration_s=info.claimed_duration_s,
            frames_read=video.read,
            frames_processed=self.processed,
            frames_detected=self.detected,
            frames_skipped=video.read - self.processed,
            tracks=self.tracker.ids_given if self.tracker is not None else 0,
            stopped_by=video.stopped_by,
        )

    async def _stop_decoding(self) -> None:
        """Drop the group decoding ahead, if any, once it is done (its frames are a bounded few)."""
        if self._next is not None:
            pending, self._next = self._next, None
            await asyncio.gather(pending, return_exceptions=True)


def _line(value: object) -> bytes:
    return json.dumps(value).encode() + b"\n"


@asynccontextmanager
async def video_job(
    run: PipelineRequest,
    data: bytes | bytearray,
    options: VideoOptions,
    config: VideoConfig,
    resources: Resources,
) -> AsyncIterator[VideoJob]:
    """The video in ``data`` opened, checked, its working set held and its first frames decoded (see the
    module's docstring); everything is given back when the block ends."""
    async with AsyncExitStack() as held:
        video = await resources.scheduler.run(0, VideoReader.open, data, config.limits)
        # Closed in a worker thread: it waits there for a frame still decoding, even if this is cancelled.
        held.push_async_callback(resources.scheduler.run, 0, video.close)
        cost = working_set(video.info.pixels, config.frames_in_flight, options.format)
        await held.enter_async_context(
            resources.image_budget.hold(cost, resources.budget_wait_s, field="video")
        )
        job = VideoJob(run, video, options, config, resources)
        try:
            await job.first()
            yield job
        finally:
            await job._stop_decoding()

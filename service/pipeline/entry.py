"""The one way a request reaches a model, whatever its protocol: `DetectionPipeline`.

Every caller (/detect, the Open Inference Protocol's infer, video files and streams) goes through it the
same way::

    async with pipeline.admit(model, started_at, gone=...) as run:  # deadline; 429 at once when overloaded
        images = await run.hold_input(read_body(...))  # its memory held until inference is done
        result = await run.detect(images, options)  # or run.infer_encoded / run.infer_tensors
        outcomes = await run.detect_frames(frames, params)  # already-decoded frames (video, streams)

From there `PipelineRequest` owns the request: it reads the images' headers and checks their cost (on
the event loop when the input is small, else in a worker thread), admits the images against the queue
and counts the request in flight, decodes them under the image memory budget, queues them together so
they can share a batch (a lone small image is decoded on the inference thread as its batch starts:
`service.pipeline.detect.DecodeInBatch`), cancels what is queued when the caller goes away, gives the
input's memory back as soon as inference is done and everything else it holds when the block ends,
however it ends.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    AsyncExitStack,
    asynccontextmanager,
    nullcontext,
)
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

import numpy as np

from service.capture.recorder import Candidates, ModelIdentity, Prediction, SampleCapture
from service.errors import BadRequest
from service.imaging.postprocess import DetectParams
from service.imaging.render import ImageFormat
from service.imaging.tiling import Tiling
from service.pipeline.detect import (
    DecodeInBatch,
    ImageOutcome,
    Prepared,
    contract_outputs,
    decodes_in_batch,
    hold_image,
    plan_images,
    postprocess,
    prepare_images,
)
from service.pipeline.frames import prepare_frames
from service.pipeline.inference import Outputs, infer
from service.pipeline.inputs import ImageUpload
from service.pipeline.output import MaskFormat, boxed_image, json_results
from service.pipeline.shadow import OnCompared, ShadowRunner
from service.pipeline.tasks import Gone, cancel_when_gone
from service.pipeline.timing import RequestStages
from service.runtime import tracing
from service.runtime.admission import Resources
from service.runtime.batching.batch_queue import Priority
from service.runtime.loaded_model import LoadedModel
from service.schemas import DetectionResult

T = TypeVar("T")

# Inputs of at most this many bytes are parsed on the event loop: a worker-thread round trip costs more
# than parsing a typical image header (~10 us). Parsing time grows with the number of JPEG segments, so
# this also bounds the worst case (16 Ki empty segments: ~10 ms here).
INLINE_PARSE_BYTES = 64 * 1024

OutputFormat = Literal["json", "jpeg", "png"]


class InFlight(Protocol):
    """Counts the requests admitted for inference (`service.http.lifecycle.Lifecycle`)."""

    def admitted(self) -> AbstractContextManager[None]:
        """Count the block as in flight; raise (503) instead when no new work is taken (draining)."""
        ...


@dataclass(frozen=True)
class DetectOptions:
    """What a detect request asks for: filters, and JSON results or one boxed image."""

    params: DetectParams = field(default_factory=DetectParams)
    format: OutputFormat = "json"
    mask_format: MaskFormat = "rle"
    tiling: Tiling = field(default_factory=Tiling)
    draw_tiles: bool = False  # a boxed image shows the tile grid


@dataclass(frozen=True)
class BoxedImage:
    """The one image of a request with its detections drawn, encoded as ``format``."""

    data: bytes
    format: ImageFormat
    detections: int


class DetectionPipeline:
    """Shared by every request: the budgets and worker threads, the request timeout, the in-flight count."""

    def __init__(
        self,
        resources: Resources,
        request_timeout_s: float,
        in_flight: InFlight,
        capture: SampleCapture | None = None,
        shadow: ShadowRunner | None = None,
    ):
        self.resources = resources
        self.request_timeout_s = request_timeout_s
        self.in_flight = in_flight
        self.capture = capture
        self.shadow = shadow  # copies to a rollout's candidate version (service.pipeline.shadow)

    @asynccontextmanager
    async def admit(
        self,
        model: LoadedModel,
        started_at: float,
        *,
        gone: Gone | None = None,
        timeout_s: float | None = None,
        priority: Priority = "interactive",
    ) -> AsyncIterator[PipelineRequest]:
        """One request for ``model`` that arrived at ``started_at`` (`time.monotonic`), for the block.

        Its deadline is ``started_at`` plus the request timeout. It is refused at once (`QueueFull`,
        429; `ServiceUnavailable`, 503) when the model could not take even one image by then, before any
        input is read. ``gone`` returns when the caller went away: queued work is then cancelled
        (`ClientClosedRequest`). Whatever the request holds is given back when the block ends.
        ``timeout_s`` replaces the request timeout (a stream frame: its lag bound); ``priority`` places its
        images in the batcher (stream frames go after interactive requests:
        `service.runtime.batching.batcher`).
        """
        deadline = started_at + (self.request_timeout_s if timeout_s is None else timeout_s)
        model.admit(1, deadline, priority)
        async with AsyncExitStack() as held:
            inputs = await held.enter_async_context(AsyncExitStack())
            yield PipelineRequest(self, model, started_at, deadline, gone, held, inputs, priority)


class PipelineRequest:
    """One admitted request: see `DetectionPipeline.admit`."""

    def __init__(
        self,
        pipeline: DetectionPipeline,
        model: LoadedModel,
        started_at: float,
        deadline: float,
        gone: Gone | None,
        held: AsyncExitStack,
        inputs: AsyncExitStack,
        priority: Priority = "interactive",
    ):
        self.model = model
        self.priority = priority
        self.started_at = started_at
        self.deadline = deadline
        self.stages = RequestStages(model.metrics, tracing.REQUEST_SPAN.get())
        self._pipeline = pipeline
        self._resources = pipeline.resources
        self._gone = gone
        self._held = held
        self._inputs = inputs
        self._counted = False  # in the in-flight count (from its first admitted image on)

    async def hold_input(self, source: AbstractAsyncContextManager[T]) -> T:
        """Enter ``source`` (e.g. reading a body into the body memory budget) and return what it gives;
        it is left as soon as inference is done, or when the request ends."""
        started = time.perf_counter()
        value = await self._inputs.enter_async_context(source)
        self.stages.span("read_body", started, time.perf_counter())
        return value

    async def compute(
        self, work: Callable[..., T], *args: object, nbytes: int | None = None, memory: int = 0
    ) -> T:
        """``work(*args)`` over ``nbytes`` of input: on the event loop when that is known and small
        (`INLINE_PARSE_BYTES`), else in a worker thread; holding ``memory`` bytes of image memory (its
        working set) while it runs."""
        async with AsyncExitStack() as scope:
            if memory:
                budget = self._resources.image_budget
                await scope.enter_async_context(
                    budget.hold(memory, self._resources.budget_wait_s, field="body")
                )
            if nbytes is not None and nbytes <= INLINE_PARSE_BYTES:
                return work(*args)
            return await self._resources.scheduler.run(0, work, *args)

    async def detect(
        self, images: list[ImageUpload], options: DetectOptions
    ) -> list[DetectionResult] | BoxedImage:
        """Each image's detections in original-image pixels, or the one image with them drawn."""
        fmt = options.format
        if fmt != "json" and len(images) > 1:
            raise BadRequest(
                f"format {fmt!r} returns one boxed image; got {len(images)} images (send one, or ask for "
                "json)",
                field="format",
            )
        tiling = options.tiling
        async with AsyncExitStack() as originals:
            with self._capture_candidates(images) as candidates:  # before decoding drops the bytes
                prepared, outputs = await self._run(images, originals if fmt != "json" else None, tiling)
                outcomes = postprocess(
                    self.model, prepared, outputs, options.params, self.stages, tiling.merge
                )
                self._after_inference(prepared, outputs, candidates, outcomes)
            if fmt == "json":
                return await json_results(
                    self.model, outcomes, self._resources, options.mask_format, self.stages
                )
            data = await boxed_image(
                self.model, outcomes[0], fmt, self._resources, self.stages, options.draw_tiles
            )
            return BoxedImage(data, fmt, len(outcomes[0].detections))

    async def infer_encoded(self, images: list[ImageUpload], tiling: Tiling | None = None) -> list[Outputs]:
        """Each encoded image's contract outputs, its boxes mapped to original-image pixels. A tiled image's
        outputs are its merged detections above the model's score threshold (`tiled_outputs`)."""
        tiling = tiling or Tiling()
        prepared, outputs = await self._run(images, None, tiling)
        self._after_inference(prepared, outputs)
        return contract_outputs(self.model, prepared, outputs, tiling.merge)

    async def infer_tensors(self, images: Sequence[np.ndarray]) -> list[Outputs]:
        """Each network-sized image's (``uint8 [H, W, 3]``) contract outputs."""
        self._admit(len(images))
        network_inputs = [np.ascontiguousarray(image) for image in images]
        outputs = await cancel_when_gone(
            self._gone, infer(self.model, network_inputs, self.deadline, self.stages)
        )
        await self._inputs.aclose()  # inference is done: the input is no longer needed
        shadow = self._pipeline.shadow
        candidate = shadow.wants(self.model) if shadow is not None else None
        if shadow is not None and candidate is not None:
            shadow.start(self.model, candidate, network_inputs, outputs)
        return outputs

    async def detect_frames(
        self,
        frames: Sequence[np.ndarray],
        params: DetectParams,
        *,
        labels: Sequence[str] | None = None,
        keep_frames: bool = False,
    ) -> list[ImageOutcome]:
        """Detections of already-decoded RGB ``uint8 [H, W, 3]`` frames (a video file's, a stream's) in
        their pixels; each frame is an item of the model's batcher like an uploaded image, and the frames
        of one call are queued together so they can share a batch (with other requests' images too).

        A video outlives one request's deadline: each call is admitted against the queue (429 when it
        could not start in time) with its own deadline, the request timeout from now. The frames' memory
        is the caller's to hold (see `service.video`); with ``keep_frames`` each outcome keeps its frame
        (to draw on). ``labels`` name the frames in errors (default ``frames[i]``). A stream frame (priority
        ``stream``) keeps the deadline it was admitted with instead: its lag bound from capture.
        """
        if self.priority == "stream":
            deadline = self.deadline
        else:
            deadline = time.monotonic() + self._pipeline.request_timeout_s
        self.model.admit(len(frames), deadline, self.priority)
        if not self._counted:
            self._held.enter_context(self._pipeline.in_flight.admitted())
            self._counted = True
        names = list(labels) if labels is not None else [f"frames[{i}]" for i in range(len(frames))]
        pixels = sum(frame.shape[0] * frame.shape[1] for frame in frames)
        prepared = await self._resources.scheduler.run(
            pixels, prepare_frames, self.model, frames, names, keep_frames, self.stages
        )
        network_inputs = [item.views[0].network_input for item in prepared]
        outputs = await infer(self.model, network_inputs, deadline, self.stages, self.priority)
        return postprocess(self.model, prepared, outputs, params, self.stages)

    def server_timing(self) -> str:
        """The ``Server-Timing`` value: each stage so far, and the total since arrival."""
        return self.stages.server_timing(time.monotonic() - self.started_at)

    async def _run(
        self, images: list[ImageUpload], originals: AsyncExitStack | None, tiling: Tiling
    ) -> tuple[list[Prepared], list[Outputs]]:
        nbytes = sum(len(image.data) for image in images)
        plans = await self.compute(
            plan_images, self.model, images, self._resources, originals is not None, tiling, nbytes=nbytes
        )
        inputs = sum(plan.inputs for plan in plans)
        # Tiles are queued tiling_batch_size at a time, one window after the other, after interactive images:
        # they take that much room in the queue, and all of them count in the expected wait.
        window = self._resources.tiling_batch_size if any(p.tiles for p in plans) else None
        self._admit(inputs, room=None if window is None else min(inputs, window))

        async def decode_in_batch() -> tuple[list[Prepared], list[Outputs]]:
            upload, plan, keep = images[0], plans[0], originals is not None
            async with AsyncExitStack() as decoding:
                held = hold_image(self.model, self._resources, upload, plan, keep_original=keep)
                await (originals if originals is not None else decoding).enter_async_context(held)
                item = DecodeInBatch(self.model, upload, plan, keep, self.stages)
                outputs = await infer(self.model, [item], self.deadline, self.stages, self.priority)
            assert item.prepared is not None  # its batch ran: outputs came back
            return [item.prepared], outputs

        async def decode_and_infer() -> tuple[list[Prepared], list[Outputs]]:
            prepared = await prepare_images(
                self.model, images, plans, self._resources, self.stages, originals
            )
            network_inputs = [view.network_input for item in prepared for view in item.views]
            priority: Priority = self.priority if window is None else "bulk"
            outputs = await infer(self.model, network_inputs, self.deadline, self.stages, priority, window)
            return prepared, outputs

        run = decode_in_batch if decodes_in_batch(self.model, self._resources, plans) else decode_and_infer
        result = await cancel_when_gone(self._gone, run())
        await self._inputs.aclose()  # every image is decoded: its encoded bytes are no longer needed
        return result

    def _capture_candidates(self, images: list[ImageUpload]) -> AbstractContextManager[Candidates | None]:
        """The images sample capture may keep (`service.capture`); nothing when it is off."""
        capture = self._pipeline.capture
        if capture is None or not capture.on:
            return nullcontext(None)
        return capture.candidates([image.data for image in images])

    def _after_inference(
        self,
        prepared: list[Prepared],
        outputs: list[Outputs],
        candidates: Candidates | None = None,
        outcomes: list[ImageOutcome] | None = None,
    ) -> None:
        """Offer the images to sample capture, and a copy of the request to a rollout's candidate version
        (`service.pipeline.shadow`): both only decide here; nothing waits."""
        shadow = self._pipeline.shadow
        candidate = shadow.wants(self.model) if shadow is not None else None
        # Disagreement is judged per image: only when every image is one view (not tiled).
        per_image = candidate is not None and all(len(item.views) == 1 for item in prepared)
        kept: list[tuple[bytes | bytearray, Prediction] | None] = []
        if candidates is not None and outcomes is not None:
            kept = self._offer_captures(candidates, outcomes, keep=per_image)
        if shadow is None or candidate is None:
            return
        network_inputs = [view.network_input for item in prepared for view in item.views]
        on_compared = self._capture_disagreement(kept) if any(kept) else None
        shadow.start(self.model, candidate, network_inputs, outputs, on_compared)

    def _identity(self) -> ModelIdentity:
        manifest = self.model.manifest
        return ModelIdentity(self.model.name, self.model.version, manifest.labels, manifest.default_threshold)

    def _offer_captures(
        self, candidates: Candidates, outcomes: list[ImageOutcome], keep: bool
    ) -> list[tuple[bytes | bytearray, Prediction] | None]:
        """Offer each image to capture; with ``keep``, those not chosen, held for the shadow's verdict."""
        identity = self._identity()
        kept: list[tuple[bytes | bytearray, Prediction] | None] = []
        for index, outcome in enumerate(outcomes):
            found = outcome.detections
            prediction = Prediction(outcome.width, outcome.height, found.boxes, found.scores, found.classes)
            data = candidates.offer(index, identity, prediction, keep=keep)
            kept.append(None if data is None else (data, prediction))
        return kept

    def _capture_disagreement(self, kept: list[tuple[bytes | bytearray, Prediction] | None]) -> OnCompared:
        capture, identity = self._pipeline.capture, self._identity()
        assert capture is not None

        def compared(agreements: list[float] | None) -> None:
            for index, item in enumerate(kept):
                if item is None:
                    continue
                data, prediction = item
                if agreements is None:
                    capture.release(data)
                else:
                    capture.offer_disagreement(data, identity, prediction, agreements[index])

        return compared

    def _admit(self, images: int, room: int | None = None) -> None:
        """Admit the request's ``images`` against the queue (``room``: the places they take in it at once,
        default all), and count it in flight from here on."""
        self.model.admit(images, self.deadline, self.priority, room)
        self._held.enter_context(self._pipeline.in_flight.admitted())
        self._counted = True

"""The stages of detection: plan -> decode + resize (worker threads) -> batcher -> postprocess -> output.

`service.pipeline.entry` runs them, in this order, for every protocol. Every image's header is read and
its cost checked (per-request pixel limit, expected queue wait) before any pixel is decoded. Images are
then decoded one at a time, each holding its memory in the process-wide image budget only while it is
needed: for JSON only the network input and the original size survive decoding; a boxed image keeps its
original until it is drawn. Every image of a request is decoded and validated before any of them is
queued, so a bad image fails the request without spending inference on the good ones, and the images
are queued together so they can share a batch. Each stage is timed into the model's metrics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Literal

import numpy as np

from contract.geometry import BoxTransform, network_content_size, resize_for_network
from contract.manifest import MASK_OUTPUT
from service.errors import PayloadTooLarge
from service.imaging.decoding import DecodePlan, decode_planned, plan_decode
from service.imaging.masks import PastedMask, masks_to_polygons, masks_to_rles, paste_mask
from service.imaging.postprocess import DetectParams, KeptDetections, select_detections, to_schema
from service.imaging.render import ImageFormat, render_detections
from service.pipeline.inputs import ImageUpload
from service.pipeline.tasks import gather_in_order
from service.pipeline.timing import RequestStages
from service.runtime.admission import (
    DECODE_BYTES_PER_PIXEL,
    MASK_BYTES_PER_PIXEL,
    RENDER_BYTES_PER_PIXEL,
    Resources,
)
from service.runtime.model_runtime import LoadedModel
from service.schemas import DetectionResult

MaskFormat = Literal["rle", "polygon"]
Outputs = dict[str, np.ndarray]


@dataclass
class Prepared:
    """One decoded image: the network input, how its boxes map back, and the original when drawing."""

    upload: ImageUpload
    size: tuple[int, int]  # original (width, height), after EXIF orientation
    network_input: np.ndarray
    transform: BoxTransform
    image: np.ndarray | None  # RGB uint8 [H, W, 3], kept only to draw the boxed image


@dataclass
class ImageOutcome:
    """One image after inference: its original size (and pixels, when drawing), and its detections."""

    upload: ImageUpload
    width: int  # original size, after EXIF orientation
    height: int
    transform: BoxTransform
    detections: KeptDetections
    masks: np.ndarray | None  # float32 [N, Mh, Mw] for the kept detections (mask models only)
    image: np.ndarray | None = None  # RGB uint8 [H, W, 3], kept only to draw the boxed image


def plan_images(
    model: LoadedModel, uploads: list[ImageUpload], resources: Resources, keep_original: bool
) -> list[DecodePlan]:
    """Read every header and check the request's decoded pixels against ``max_request_pixels``."""
    spec = model.manifest.input
    plans: list[DecodePlan] = []
    reduce_to = None
    if resources.reduced_jpeg_decode and not keep_original:

        def reduce_to(size: tuple[int, int]) -> tuple[int, int]:
            return network_content_size(spec, size)

    for upload in uploads:
        plans.append(
            plan_decode(
                upload.data, max_pixels=resources.max_image_pixels, field=upload.label, reduce_to=reduce_to
            )
        )
    total = sum(p.decoded_pixels for p in plans)
    if total > resources.max_request_pixels:
        raise PayloadTooLarge(
            f"the request's {len(plans)} image(s) decode to {total} pixels; the limit per request is "
            f"{resources.max_request_pixels} (send fewer or smaller images)",
            field="images",
        )
    return plans


def _prepare(
    model: LoadedModel, upload: ImageUpload, plan: DecodePlan, keep_original: bool, stages: RequestStages
) -> Prepared:
    started = time.perf_counter()
    image = decode_planned(upload.data, plan, field=upload.label)
    upload.discard()  # the encoded bytes are no longer needed
    decoded = time.perf_counter()
    size = plan.original_size if plan.scale_denominator > 1 else (image.shape[1], image.shape[0])
    network_input, transform = resize_for_network(image, model.manifest.input, size)
    stages.stage("decode", decoded - started)
    stages.stage("preprocess", time.perf_counter() - decoded)
    return Prepared(upload, size, network_input, transform, image if keep_original else None)


async def prepare_images(
    model: LoadedModel,
    uploads: list[ImageUpload],
    plans: list[DecodePlan],
    resources: Resources,
    stages: RequestStages,
    originals: AsyncExitStack | None,
) -> list[Prepared]:
    """Decode and resize the images one at a time, each inside its share of the image budget.

    With ``originals`` the decoded originals are kept to draw on, and their memory stays held until
    that stack closes; without, an image's memory is held only while it is decoded.
    """
    per_pixel = RENDER_BYTES_PER_PIXEL if originals is not None else DECODE_BYTES_PER_PIXEL
    prepared: list[Prepared] = []
    for upload, plan in zip(uploads, plans, strict=True):
        held = resources.image_budget.hold(
            plan.decoded_pixels * per_pixel, resources.budget_wait_s, field=upload.label
        )
        async with AsyncExitStack() as decoding:
            owner = originals if originals is not None else decoding
            await owner.enter_async_context(held)
            prepared.append(
                await resources.scheduler.run(
                    plan.decoded_pixels, _prepare, model, upload, plan, originals is not None, stages
                )
            )
    return prepared


async def infer(
    model: LoadedModel, images: list[np.ndarray], deadline: float | None, stages: RequestStages
) -> list[Outputs]:
    """Each network-sized image's outputs, queued together so they can share a batch.

    ``deadline`` is the `time.monotonic` time by which inference must start (None: no limit).
    """
    times: list[dict[str, float]] = [{} for _ in images]
    outputs = await gather_in_order(
        model.submit(image, deadline, image_times) for image, image_times in zip(images, times, strict=True)
    )
    for image_times in times:
        for stage, seconds in image_times.items():
            stages.longest(stage, seconds)
    return outputs


def postprocess(
    model: LoadedModel,
    prepared: list[Prepared],
    outputs: list[Outputs],
    params: DetectParams,
    stages: RequestStages,
) -> list[ImageOutcome]:
    """Each image's kept detections (and their masks) in original-image pixels."""
    outcomes: list[ImageOutcome] = []
    for item, output in zip(prepared, outputs, strict=True):
        started = time.perf_counter()
        detections = select_detections(output, item.transform, model.manifest, params)
        masks = output[MASK_OUTPUT][detections.rows] if MASK_OUTPUT in output else None
        stages.stage("postprocess", time.perf_counter() - started)
        width, height = item.size
        outcomes.append(
            ImageOutcome(item.upload, width, height, item.transform, detections, masks, item.image)
        )
    return outcomes


def _json_result(
    model: LoadedModel, outcome: ImageOutcome, mask_format: MaskFormat, stages: RequestStages
) -> DetectionResult:
    started = time.perf_counter()
    height, width = outcome.height, outcome.width
    rles = polygons = None
    if outcome.masks is not None and mask_format == "polygon":
        polygons = masks_to_polygons(outcome.masks, outcome.detections.boxes, height, width)
    elif outcome.masks is not None:
        rles = masks_to_rles(outcome.masks, outcome.detections.boxes, height, width)
    result = DetectionResult(
        model=model.name,
        version=model.version,
        filename=outcome.upload.filename,
        width=width,
        height=height,
        detections=to_schema(outcome.detections, model.manifest.labels, rles, polygons),
    )
    stages.stage("encode", time.perf_counter() - started)
    return result


async def json_results(
    model: LoadedModel,
    outcomes: list[ImageOutcome],
    resources: Resources,
    mask_format: MaskFormat,
    stages: RequestStages,
) -> list[DetectionResult]:
    """Response objects, one image at a time; mask pasting and RLE / polygon encoding run in the worker
    threads, holding the pasted masks' memory in the image budget."""
    results: list[DetectionResult] = []
    for outcome in outcomes:
        pixels = outcome.width * outcome.height if outcome.masks is not None and len(outcome.masks) else 0
        if not pixels:
            # No mask to paste: building the response objects takes tens of microseconds, less than the
            # round trip through a worker thread would cost.
            results.append(_json_result(model, outcome, mask_format, stages))
            continue
        held = resources.image_budget.hold(
            pixels * MASK_BYTES_PER_PIXEL, resources.budget_wait_s, field=outcome.upload.label
        )
        async with held:
            results.append(
                await resources.scheduler.run(pixels, _json_result, model, outcome, mask_format, stages)
            )
    return results


def _render(model: LoadedModel, outcome: ImageOutcome, fmt: ImageFormat, stages: RequestStages) -> bytes:
    started = time.perf_counter()
    assert outcome.image is not None, "the original is kept for drawing"
    height, width = outcome.image.shape[:2]
    pasted: Iterator[PastedMask] | None = None
    if outcome.masks is not None:  # pasted lazily, one at a time, as they are drawn
        pasted = (
            paste_mask(mask, box, height, width)
            for mask, box in zip(outcome.masks, outcome.detections.boxes, strict=True)
        )
    data = render_detections(outcome.image, outcome.detections, model.manifest.labels, fmt, pasted)
    stages.stage("render", time.perf_counter() - started)
    return data


async def boxed_image(
    model: LoadedModel, outcome: ImageOutcome, fmt: ImageFormat, resources: Resources, stages: RequestStages
) -> bytes:
    """The original image with its detections drawn, encoded as ``fmt`` (in a worker thread)."""
    return await resources.scheduler.run(outcome.width * outcome.height, _render, model, outcome, fmt, stages)

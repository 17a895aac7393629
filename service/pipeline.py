"""One detect request, stage by stage: decode + resize (worker thread) -> batcher -> postprocess -> output.

Every image of a request is decoded and validated before any of them is queued, so a bad image fails
the request without spending inference on the good ones. The images are then queued together, so they
can share a batch. Each stage is timed into the model's metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from service.imaging import BoxTransform, decode_image, resize_for_network
from service.manifest import MASK_OUTPUT
from service.masks import PastedMask, masks_to_polygons, masks_to_rles, paste_mask
from service.postprocess import Detections, DetectParams, select_detections, to_schema
from service.render import ImageFormat, render_detections
from service.runtime import LoadedModel
from service.schemas import DetectionResult
from service.uploads import ImageUpload

T = TypeVar("T")
MaskFormat = Literal["rle", "polygon"]


@dataclass(frozen=True)
class ImageOutcome:
    """One image after inference: the decoded original, how it was resized, and its kept detections."""

    upload: ImageUpload
    image: np.ndarray  # RGB uint8 [H, W, 3], original size
    transform: BoxTransform
    detections: Detections
    masks: np.ndarray | None  # float32 [N, Mh, Mw] for the kept detections (mask models only)


@dataclass(frozen=True)
class _Prepared:
    upload: ImageUpload
    image: np.ndarray
    network_input: np.ndarray
    transform: BoxTransform


def _prepare(model: LoadedModel, upload: ImageUpload, max_pixels: int) -> _Prepared:
    started = time.perf_counter()
    image = decode_image(upload.data, max_pixels=max_pixels, field=upload.label)
    decoded = time.perf_counter()
    network_input, transform = resize_for_network(image, model.manifest.input)
    model.metrics.stage("decode", decoded - started)
    model.metrics.stage("preprocess", time.perf_counter() - decoded)
    return _Prepared(upload, image, network_input, transform)


def _first_error(results: list[T | BaseException]) -> list[T]:
    """Raise the first exception in request order (so errors name the first bad image), else the values."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


async def run_detection(
    model: LoadedModel,
    uploads: list[ImageUpload],
    params: DetectParams,
    *,
    executor: Executor,
    max_pixels: int,
    deadline: float | None,
) -> list[ImageOutcome]:
    """Detections for each upload, in order.

    ``deadline`` is the `time.monotonic` time by which inference must start (None: no limit).
    """
    loop = asyncio.get_running_loop()
    prepared = _first_error(
        await asyncio.gather(
            *(loop.run_in_executor(executor, _prepare, model, upload, max_pixels) for upload in uploads),
            return_exceptions=True,
        )
    )
    outputs = _first_error(
        await asyncio.gather(
            *(model.submit(p.network_input, deadline) for p in prepared), return_exceptions=True
        )
    )
    outcomes: list[ImageOutcome] = []
    for item, output in zip(prepared, outputs, strict=True):
        started = time.perf_counter()
        detections = select_detections(output, item.transform, model.manifest, params)
        masks = output[MASK_OUTPUT][detections.rows] if MASK_OUTPUT in output else None
        model.metrics.stage("postprocess", time.perf_counter() - started)
        outcomes.append(ImageOutcome(item.upload, item.image, item.transform, detections, masks))
    return outcomes


def _json_result(model: LoadedModel, outcome: ImageOutcome, mask_format: MaskFormat) -> DetectionResult:
    started = time.perf_counter()
    height, width = outcome.image.shape[:2]
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
    model.metrics.stage("encode", time.perf_counter() - started)
    return result


async def json_results(
    model: LoadedModel, outcomes: list[ImageOutcome], executor: Executor, mask_format: MaskFormat = "rle"
) -> list[DetectionResult]:
    """Response objects; mask pasting and RLE / polygon encoding run in the worker threads."""
    loop = asyncio.get_running_loop()
    return list(
        await asyncio.gather(
            *(loop.run_in_executor(executor, _json_result, model, o, mask_format) for o in outcomes)
        )
    )


def _render(model: LoadedModel, outcome: ImageOutcome, fmt: ImageFormat) -> bytes:
    started = time.perf_counter()
    height, width = outcome.image.shape[:2]
    pasted: Iterator[PastedMask] | None = None
    if outcome.masks is not None:  # pasted lazily, one at a time, as they are drawn
        pasted = (
            paste_mask(mask, box, height, width)
            for mask, box in zip(outcome.masks, outcome.detections.boxes, strict=True)
        )
    data = render_detections(outcome.image, outcome.detections, model.manifest.labels, fmt, pasted)
    model.metrics.stage("render", time.perf_counter() - started)
    return data


async def boxed_image(
    model: LoadedModel, outcome: ImageOutcome, fmt: ImageFormat, executor: Executor
) -> bytes:
    """The original image with its detections drawn, encoded as ``fmt`` (in a worker thread)."""
    return await asyncio.get_running_loop().run_in_executor(executor, _render, model, outcome, fmt)

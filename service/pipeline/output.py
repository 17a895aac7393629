"""The last stage of detection: each image's outcome (`service.pipeline.detect.ImageOutcome`) as a response
object (masks pasted and encoded as RLE or polygons) or as the original image with its detections drawn.
Work that touches pixels runs in the worker threads, holding its memory in the image budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal

from service.imaging.masks import PastedMask, masks_to_polygons, masks_to_rles, paste_mask
from service.imaging.postprocess import to_schema
from service.imaging.render import ImageFormat, render_detections
from service.imaging.tiling import Tile
from service.pipeline.detect import ImageOutcome
from service.pipeline.timing import RequestStages
from service.runtime.admission import (
    MASK_BYTES_PER_PIXEL,
    Resources,
)
from service.runtime.loaded_model import LoadedModel
from service.schemas import Box, DetectionResult

MaskFormat = Literal["rle", "polygon"]


def _tile_boxes(tiles: list[Tile] | None) -> list[Box] | None:
    return None if tiles is None else [Box(x1=t.x0, y1=t.y0, x2=t.x1, y2=t.y1) for t in tiles]


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
        served_by=model.served_by,
        tiles=_tile_boxes(outcome.tiles),
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


def _render(
    model: LoadedModel, outcome: ImageOutcome, fmt: ImageFormat, draw_tiles: bool, stages: RequestStages
) -> bytes:
    started = time.perf_counter()
    assert outcome.image is not None, "the original is kept for drawing"
    height, width = outcome.image.shape[:2]
    pasted: Iterator[PastedMask] | None = None
    if outcome.masks is not None:  # pasted lazily, one at a time, as they are drawn
        pasted = (
            paste_mask(mask, box, height, width)
            for mask, box in zip(outcome.masks, outcome.detections.boxes, strict=True)
        )
    grid = [(t.x0, t.y0, t.x1, t.y1) for t in outcome.tiles or ()] if draw_tiles else []
    data = render_detections(outcome.image, outcome.detections, model.manifest.labels, fmt, pasted, grid)
    stages.stage("render", time.perf_counter() - started)
    return data


async def boxed_image(
    model: LoadedModel,
    outcome: ImageOutcome,
    fmt: ImageFormat,
    resources: Resources,
    stages: RequestStages,
    draw_tiles: bool = False,
) -> bytes:
    """The original image with its detections drawn (and its tile grid, with ``draw_tiles``), encoded
    as ``fmt`` (in a worker thread)."""
    pixels = outcome.width * outcome.height
    return await resources.scheduler.run(pixels, _render, model, outcome, fmt, draw_tiles, stages)

"""The stages of detection: plan -> decode + resize (worker threads) -> batcher -> postprocess -> output.

A request's one small untiled image is decoded and resized on the inference thread instead, as its batch
starts (`DecodeInBatch`, setting ``decode_in_batch``).

`service.pipeline.entry` runs them, in this order, for every protocol; the output stage is
`service.pipeline.output`. Every image's header is read and its cost checked (per-request pixel limit,
expected queue wait) before any pixel is decoded. Images are then decoded one at a time, each holding its
memory in the process-wide image budget only while it is needed: for JSON only the network input and the
original size survive decoding; a boxed image keeps its original until it is drawn. Every image of a request
is decoded and validated before any of them is queued, so a bad image fails the request without spending
inference on the good ones, and the images are queued together so they can share a batch. Each stage is timed
into the model's metrics.
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, replace

import numpy as np

from contract.geometry import BoxTransform, network_content_size, resize_for_network
from contract.manifest import MASK_OUTPUT, InputSpec
from service.errors import PayloadTooLarge
from service.imaging.decoding import DecodePlan, decode_planned, plan_decode
from service.imaging.merging import MergeRule, TilePart, merge_detections
from service.imaging.postprocess import DetectParams, KeptDetections, select_detections, valid_count
from service.imaging.tiling import Tile, Tiling, cut_by_tile, plan_tiles
from service.pipeline.inference import Outputs
from service.pipeline.inputs import ImageUpload
from service.pipeline.tile_budget import tile_budget
from service.pipeline.timing import RequestStages
from service.runtime.admission import (
    DECODE_BYTES_PER_PIXEL,
    HEAVY_PIXELS,
    RENDER_BYTES_PER_PIXEL,
    Resources,
)
from service.runtime.loaded_model import LoadedModel

_UNLIMITED = 1 << 30


@dataclass(frozen=True)
class View:
    """One network input of an image (the whole image, or one tile) and how its boxes map back: through
    ``transform`` to the view's pixels, then by ``origin`` (x, y of the view in the original)."""

    network_input: np.ndarray
    transform: BoxTransform
    tile: Tile | None = None  # None: the whole image

    @property
    def origin(self) -> tuple[int, int]:
        return (0, 0) if self.tile is None else (self.tile.x0, self.tile.y0)

    def boxes_to_original(self, boxes: np.ndarray) -> np.ndarray:
        """``[N, 4]`` boxes normalized to the network input -> original-image pixels."""
        out = self.transform.boxes_to_original(boxes)
        if self.origin != (0, 0):
            out += np.array([*self.origin, *self.origin], dtype=np.float32)
        return out


@dataclass(frozen=True)
class ImagePlan:
    """How one image will be decoded, and the tiles it is cut into (None: not tiled)."""

    decode: DecodePlan
    tiles: list[Tile] | None

    full_image: bool = True

    @property
    def inputs(self) -> int:
        """Network inputs this image takes: 1, or its tiles (plus the whole image when it is run too)."""
        return 1 if self.tiles is None else len(self.tiles) + int(self.full_image)


@dataclass
class Prepared:
    """One decoded image: its network inputs (one per view), and the original when drawing."""

    upload: ImageUpload
    size: tuple[int, int]  # original (width, height), after EXIF orientation
    views: list[View]
    tiles: list[Tile] | None
    image: np.ndarray | None  # RGB uint8 [H, W, 3], kept only to draw the boxed image


@dataclass
class ImageOutcome:
    """One image after inference: its original size (and pixels, when drawing), and its detections."""

    upload: ImageUpload
    width: int  # original size, after EXIF orientation
    height: int
    detections: KeptDetections
    masks: np.ndarray | None  # float32 [N, Mh, Mw] for the kept detections (mask models only)
    image: np.ndarray | None = None  # RGB uint8 [H, W, 3], kept only to draw the boxed image
    tiles: list[Tile] | None = None


def plan_images(
    model: LoadedModel,
    uploads: list[ImageUpload],
    resources: Resources,
    keep_original: bool,
    tiling: Tiling | None = None,
) -> list[ImagePlan]:
    """Read every header, plan each image's tiles, and check the request's decoded pixels against
    ``max_request_pixels`` and its tiles against the tile budget (`service.pipeline.tile_budget`)."""
    spec = model.manifest.input
    tiling = tiling or Tiling()
    budget = tile_budget(model, resources) if tiling.mode != "off" else None
    reduce_to = None
    if resources.reduced_jpeg_decode and not keep_original:

        def reduce_to(size: tuple[int, int]) -> tuple[int, int]:
            return network_content_size(spec, size)

    plans: list[ImagePlan] = []
    for upload in uploads:
        # Tiles need the full-size pixels: a reduced decode only for an image that is not tiled.
        header_only = tiling.mode != "off"
        decode = plan_decode(
            upload.data,
            max_pixels=resources.max_image_pixels,
            field=upload.label,
            reduce_to=None if header_only else reduce_to,
        )
        tiles = None
        if budget is not None:
            share = budget.auto // len(uploads) if tiling.mode == "auto" else budget.inputs - len(uploads) + 1
            tiles = plan_tiles(
                decode.original_size, (spec.width, spec.height), tiling, max(1, share), field="tiling"
            )
        if header_only and tiles is None and reduce_to is not None:
            decode = plan_decode(
                upload.data, max_pixels=resources.max_image_pixels, field=upload.label, reduce_to=reduce_to
            )
        plans.append(ImagePlan(decode, tiles, tiling.full_image))
    total = sum(p.decode.decoded_pixels for p in plans)
    if total > resources.max_request_pixels:
        raise PayloadTooLarge(
            f"the request's {len(plans)} image(s) decode to {total} pixels; the limit per request is "
            f"{resources.max_request_pixels} (send fewer or smaller images)",
            field="images",
        )
    inputs = sum(p.inputs for p in plans)
    if budget is not None and inputs > max(budget.inputs, len(plans)):
        raise PayloadTooLarge(
            f"the request's {len(plans)} image(s) are cut into {inputs} network inputs; a request's tiles "
            f"may make at most {budget.inputs} ({budget.reason}): send larger tiles or fewer images",
            field="tiling",
        )
    return plans


def _views(image: np.ndarray, spec: InputSpec, size: tuple[int, int], plan: ImagePlan) -> list[View]:
    """The image's network inputs: the whole image, then (when tiled) each tile at full resolution."""
    views: list[View] = []
    if plan.tiles is None or plan.full_image:
        views.append(View(*resize_for_network(image, spec, size)))
    for tile in plan.tiles or ():
        crop = image[tile.y0 : tile.y1, tile.x0 : tile.x1]
        views.append(View(*resize_for_network(crop, spec), tile=tile))
    return views


def _prepare(
    model: LoadedModel, upload: ImageUpload, plan: ImagePlan, keep_original: bool, stages: RequestStages
) -> Prepared:
    started = time.perf_counter()
    decode = plan.decode
    image = decode_planned(upload.data, decode, field=upload.label)
    upload.discard()  # the encoded bytes are no longer needed
    decoded = time.perf_counter()
    size = decode.original_size if decode.scale_denominator > 1 else (image.shape[1], image.shape[0])
    views = _views(image, model.manifest.input, size, plan)
    stages.stage("decode", decoded - started, ended=decoded)
    stages.stage("preprocess", time.perf_counter() - decoded)
    return Prepared(upload, size, views, plan.tiles, image if keep_original else None)


class DecodeInBatch:
    """One image decoded and resized on the inference thread just before its batch runs
    (`service.runtime.loaded_model.LazyInput`), instead of in a worker thread beside the running batch:
    ``prepared`` once its batch ran. Its memory is the caller's to hold, from queueing until then."""

    def __init__(
        self,
        model: LoadedModel,
        upload: ImageUpload,
        plan: ImagePlan,
        keep_original: bool,
        stages: RequestStages,
    ):
        self._args = (model, upload, plan, keep_original, stages)
        self.prepared: Prepared | None = None

    def network_input(self) -> np.ndarray:
        self.prepared = _prepare(*self._args)
        return self.prepared.views[0].network_input


def decodes_in_batch(model: LoadedModel, resources: Resources, plans: list[ImagePlan]) -> bool:
    """Whether a request's image is decoded on the inference thread (`DecodeInBatch`): one image, not tiled,
    under `HEAVY_PIXELS` decoded pixels, with ``decode_in_batch`` on for ``model`` (a request of several
    images decodes them all first, so a bad one costs no inference)."""
    enabled = model.serving.decode_in_batch
    if enabled is None:
        enabled = resources.decode_in_batch
    if not enabled or resources.scheduler.inline.enabled or len(plans) != 1:
        return False
    plan = plans[0]
    return plan.tiles is None and plan.decode.decoded_pixels < HEAVY_PIXELS


async def prepare_images(
    model: LoadedModel,
    uploads: list[ImageUpload],
    plans: list[ImagePlan],
    resources: Resources,
    stages: RequestStages,
    originals: AsyncExitStack | None,
) -> list[Prepared]:
    """Decode and resize the images one at a time, each inside its share of the image budget.

    With ``originals`` the decoded originals are kept to draw on, and their memory stays held until
    that stack closes; without, an image's memory is held only while it is decoded.
    """
    prepared: list[Prepared] = []
    for upload, plan in zip(uploads, plans, strict=True):
        held = hold_image(model, resources, upload, plan, keep_original=originals is not None)
        async with AsyncExitStack() as decoding:
            owner = originals if originals is not None else decoding
            await owner.enter_async_context(held)
            prepared.append(
                await resources.scheduler.run(
                    plan.decode.decoded_pixels, _prepare, model, upload, plan, originals is not None, stages
                )
            )
    return prepared


def hold_image(
    model: LoadedModel, resources: Resources, upload: ImageUpload, plan: ImagePlan, keep_original: bool
) -> AbstractAsyncContextManager[None]:
    """One image's share of the image budget: its decoded pixels (more when its original is kept to draw
    on), and a tiled image's network inputs, which live until inference."""
    per_pixel = RENDER_BYTES_PER_PIXEL if keep_original else DECODE_BYTES_PER_PIXEL
    spec = model.manifest.input
    tile_bytes = 0 if plan.tiles is None else plan.inputs * spec.width * spec.height * 3
    return resources.image_budget.hold(
        plan.decode.decoded_pixels * per_pixel + tile_bytes, resources.budget_wait_s, field=upload.label
    )


def postprocess(
    model: LoadedModel,
    prepared: list[Prepared],
    outputs: list[Outputs],
    params: DetectParams,
    stages: RequestStages,
    merge: MergeRule | None = None,
) -> list[ImageOutcome]:
    """Each image's kept detections (and their masks) in original-image pixels; ``outputs`` hold one
    entry per view, image after image. A tiled image's views are merged by ``merge``."""
    outcomes: list[ImageOutcome] = []
    views_outputs = iter(outputs)
    for item in prepared:
        started = time.perf_counter()
        own = [next(views_outputs) for _ in item.views]
        if item.tiles is None:
            view, output = item.views[0], own[0]
            detections = select_detections(output, view, model.manifest, params)
            masks = output[MASK_OUTPUT][detections.rows] if MASK_OUTPUT in output else None
            _observe_quality(model, output, item.size)
        else:
            detections, masks = _merge_views(model, item, own, params, merge or MergeRule())
            model.metrics.image_detections(detections.scores, detections.classes, *item.size)
        stages.stage("postprocess", time.perf_counter() - started)
        width, height = item.size
        outcomes.append(ImageOutcome(item.upload, width, height, detections, masks, item.image, item.tiles))
    return outcomes


def _observe_quality(model: LoadedModel, output: Outputs, size: tuple[int, int]) -> None:
    """The image's valid output rows into the quality metrics, before the request's own filters (a tiled
    image's merged detections are counted instead: they exist only after its request's filters)."""
    k = output["detection_scores"].shape[0]
    count = valid_count(output, k)
    model.metrics.image_detections(
        output["detection_scores"][:count], output["detection_classes"][:count], *size
    )


def _merge_views(
    model: LoadedModel, item: Prepared, outputs: list[Outputs], params: DetectParams, merge: MergeRule
) -> tuple[KeptDetections, np.ndarray | None]:
    """A tiled image's detections: each view's, filtered and in original pixels, then merged."""
    every = replace(params, max_detections=_UNLIMITED)  # the limit applies to the merged detections
    parts = []
    for view, output in zip(item.views, outputs, strict=True):
        kept = select_detections(output, view, model.manifest, every)
        masks = output[MASK_OUTPUT][kept.rows] if MASK_OUTPUT in output else None
        whole = np.zeros(len(kept), dtype=bool)
        cut = whole if view.tile is None else cut_by_tile(kept.boxes, view.tile, item.size)
        parts.append(TilePart(kept, masks, cut))
    limit = model.manifest.max_detections if params.max_detections is None else params.max_detections
    return merge_detections(parts, merge, limit)


def contract_outputs(
    model: LoadedModel, prepared: list[Prepared], outputs: list[Outputs], merge: MergeRule
) -> list[Outputs]:
    """Each image's contract outputs with boxes in original-image pixels (the Open Inference Protocol's
    encoded images). A tiled image's are its views' detections above the model's ``score_threshold``,
    merged, padded to the artifact's K rows as the graph pads them."""
    results: list[Outputs] = []
    views_outputs = iter(outputs)
    for item in prepared:
        own = [next(views_outputs) for _ in item.views]
        if item.tiles is None:
            boxes = item.views[0].boxes_to_original(own[0]["detection_boxes"])
            results.append({**own[0], "detection_boxes": boxes})
            _observe_quality(model, own[0], item.size)
            continue
        params = DetectParams(score_threshold=model.manifest.score_threshold)
        detections, masks = _merge_views(model, item, own, params, merge)
        model.metrics.image_detections(detections.scores, detections.classes, *item.size)
        k = own[0]["detection_scores"].shape[0]
        n = min(len(detections), k)
        merged: Outputs = {
            "num_detections": np.array([n], dtype=np.int32),
            "detection_boxes": _padded(detections.boxes[:n], k),
            "detection_scores": _padded(detections.scores[:n], k),
            "detection_classes": _padded(detections.classes[:n], k),
        }
        if masks is not None:
            merged[MASK_OUTPUT] = _padded(masks[:n], k)
        results.append(merged)
    return results


def _padded(rows: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros((k, *rows.shape[1:]), dtype=rows.dtype)
    out[: len(rows)] = rows
    return out

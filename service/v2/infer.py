"""One Open Inference Protocol inference request, through the same stages as /detect.

The raw body is read within the body limits and budget (`service.http.uploads.body_chunks`; clients such as
``tritonclient`` send no Content-Type), parsed in a worker thread holding image memory for the JSON's
objects, then either:

- network-sized images (``UINT8 [B, H, W, 3]``) go to the model's batcher as they are, or
- encoded images (``BYTES``) are planned, decoded and resized exactly as /detect's (pixel limits,
  image memory budget, reduced JPEG decoding), and their boxes mapped back to original-image pixels.

Each image is one item of the shared dynamic batcher, so protocol and /detect requests batch together.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from starlette.requests import Request

from service.errors import PayloadTooLarge, UnsupportedMediaType
from service.http.uploads import ImageUpload, UploadLimits, body_chunks
from service.pipeline.detect import plan_images, prepare_images
from service.pipeline.timing import RequestStages
from service.runtime.admission import Resources, hold
from service.runtime.budget import MemoryBudget
from service.runtime.model_runtime import LoadedModel
from service.v2.signature import BYTES_INPUT
from service.v2.tensors import DecodedRequest, decode_request, header_length

# Image memory held while a JSON request is parsed, per byte of JSON. scripts/measure_v2_json_memory.py
# (4 images of 300x300 as JSON integers): peak RSS grew by 8.7 bytes per byte for a flat list, 19.9 for
# nested [B][H][W][3] lists (a Python list per pixel).
JSON_BYTES_PER_BYTE = 24


@dataclass
class RawBody:
    """A request body and the body-budget bytes it holds until `release` (idempotent)."""

    data: bytearray
    budget: MemoryBudget
    reserved: int

    def release(self) -> None:
        self.data = bytearray()
        if self.reserved:
            self.budget.release(self.reserved)
            self.reserved = 0


async def read_body(
    request: Request, limits: UploadLimits, budget: MemoryBudget, closing: asyncio.Event
) -> RawBody:
    """The whole body (any or no Content-Type), within ``max_body_bytes``, its timeouts and ``budget``."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding!r} is not supported; send the request uncompressed",
            field="content-encoding",
        )
    declared = request.headers.get("content-length")
    reserved = limits.max_body_bytes  # chunked: the body may be as large as the limit
    if declared is not None and declared.isdigit():
        if int(declared) > limits.max_body_bytes:
            raise PayloadTooLarge(
                f"request body is {declared} bytes; the limit is {limits.max_body_bytes}", field="body"
            )
        reserved = max(1, int(declared))
    await budget.acquire(reserved, limits.budget_wait_s, field="body")
    body = RawBody(bytearray(), budget, reserved)
    try:
        async for chunk in body_chunks(request, limits, closing):
            body.data.extend(chunk)
    except BaseException:
        body.release()
        raise
    return body


async def parse_body(
    model: LoadedModel, body: RawBody, json_header: str | None, resources: Resources, max_images: int
) -> DecodedRequest:
    """Decode ``body`` for ``model`` in a worker thread (see `service.v2.tensors.decode_request`)."""
    json_length = header_length(json_header, len(body.data))
    json_size = len(body.data) if json_length is None else json_length
    held = await hold(
        resources.image_budget, JSON_BYTES_PER_BYTE * json_size, resources.budget_wait_s, "body"
    )
    try:
        manifest = model.manifest
        return await resources.scheduler.run(
            json_size, decode_request, body.data, json_length, manifest.input, manifest.outputs, max_images
        )
    finally:
        held.release()


def _stack(outputs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.stack([o[name] for o in outputs]) for name in outputs[0]}


async def _submit_all(
    model: LoadedModel, images: list[np.ndarray], deadline: float | None
) -> list[dict[str, np.ndarray]]:
    results = await asyncio.gather(
        *(model.submit(image, deadline) for image in images), return_exceptions=True
    )
    for result in results:  # the first error in request order
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


async def run_inference(
    model: LoadedModel, decoded: DecodedRequest, resources: Resources, deadline: float | None
) -> dict[str, np.ndarray]:
    """The contract outputs for the request's B images, batch first."""
    if decoded.images is not None:
        images = [np.ascontiguousarray(image) for image in decoded.images]  # (H, W, 3) each
        return _stack(await _submit_all(model, images, deadline))
    uploads = [
        ImageUpload(label=f"{BYTES_INPUT}[{i}]", data=data) for i, data in enumerate(decoded.encoded or [])
    ]
    plans = await resources.scheduler.run(0, plan_images, model, uploads, resources, False)
    prepared = await prepare_images(model, uploads, plans, resources, False, RequestStages(model.metrics))
    outputs = _stack(await _submit_all(model, [p.network_input for p in prepared], deadline))
    boxes = outputs["detection_boxes"].copy()  # [B, K, 4]
    for i, item in enumerate(prepared):
        boxes[i] = item.transform.boxes_to_original(boxes[i])
    outputs["detection_boxes"] = boxes
    return outputs

"""One Open Inference Protocol inference request, through the same pipeline as /detect's.

The raw body is read within the body limits and budget (`service.http.uploads.read_body`; clients such as
``tritonclient`` send no Content-Type) and parsed holding image memory for the JSON's objects (in a
worker thread unless it is small), then `service.pipeline.entry` runs either

- network-sized images (``UINT8 [B, H, W, 3]``), queued to the model's batcher as they are, or
- encoded images (``BYTES``), planned, decoded and resized exactly as /detect's (pixel limits, image
  memory budget, reduced JPEG decoding), their boxes mapped back to original-image pixels.

Each image is one item of the shared dynamic batcher, so protocol and /detect requests batch together.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np
from starlette.requests import Request

from service.errors import BadRequest, UnsupportedMediaType
from service.http.tiling_options import tiling_options
from service.http.uploads import BodyReader
from service.imaging.tiling import Tiling
from service.pipeline.entry import PipelineRequest
from service.pipeline.inputs import ImageUpload
from service.settings import Settings
from service.v2.signature import BYTES_INPUT
from service.v2.tensors import DecodedRequest, decode_request, encode_response, header_length

# Image memory held while a JSON request is parsed, per byte of JSON.
# scripts/profiling/measure_v2_json_memory.py
# (4 images of 300x300 as JSON integers): peak RSS grew by 8.7 bytes per byte for a flat list, 19.9 for
# nested [B][H][W][3] lists (a Python list per pixel).
JSON_BYTES_PER_BYTE = 24


def read_request(request: Request, reader: BodyReader) -> AbstractAsyncContextManager[bytearray]:
    """The whole body (any or no Content-Type), read within the body limits; 415 if it is compressed."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding!r} is not supported; send the request uncompressed",
            field="content-encoding",
        )
    return reader.raw(request)


async def run_inference(
    run: PipelineRequest, body: bytearray, json_header: str | None, settings: Settings
) -> tuple[bytes, int | None]:
    """The response to the request in ``body``: its bytes, and the JSON part's length when a binary
    section follows (else None). ``json_header`` is the ``Inference-Header-Content-Length`` value.

    Encoded images are tiled as /detect's when the request's ``parameters`` say so (``tiling``,
    ``tile_overlap``: the same values and defaults; `infer_decoded`)."""
    max_images = settings.max_images_per_request
    model, manifest = run.model, run.model.manifest
    json_length = header_length(json_header, len(body))
    json_size = len(body) if json_length is None else json_length
    decoded = await run.compute(
        decode_request,
        body,
        json_length,
        manifest.input,
        manifest.outputs,
        max_images,
        nbytes=json_size,
        memory=JSON_BYTES_PER_BYTE * json_size,
    )
    batched = await infer_decoded(run, decoded, settings)
    return await run.compute(
        encode_response, model.name, model.version, decoded.request_id, batched, decoded.outputs
    )


async def infer_decoded(
    run: PipelineRequest, decoded: DecodedRequest, settings: Settings
) -> dict[str, np.ndarray]:
    """Run a checked request's images through the pipeline: each output with the batch dimension first.

    Encoded images are tiled as /detect's when the request's ``parameters`` say so."""
    tiling = _tiling(settings, run.model.serving.tiling, decoded.parameters, encoded=decoded.images is None)
    if decoded.images is not None:
        outputs = await run.infer_tensors(list(decoded.images))  # (H, W, 3) each
    else:
        encoded = decoded.encoded or []
        uploads = [ImageUpload(label=f"{BYTES_INPUT}[{i}]", data=data) for i, data in enumerate(encoded)]
        outputs = await run.infer_encoded(uploads, tiling)
    return {name: np.stack([output[name] for output in outputs]) for name in outputs[0]}


def _tiling(
    settings: Settings, model_tiling: str | None, parameters: dict[str, Any], *, encoded: bool
) -> Tiling:
    """The request's tiling, from its ``tiling`` and ``tile_overlap`` parameters (encoded images only)."""
    spec, overlap = parameters.get("tiling"), parameters.get("tile_overlap")
    if spec is not None and not isinstance(spec, str):
        raise BadRequest(
            f"parameters.tiling: expected a string (off, auto or WIDTHxHEIGHT); got {spec!r}",
            field="parameters.tiling",
        )
    if overlap is not None and (isinstance(overlap, bool) or not isinstance(overlap, int | float)):
        raise BadRequest(
            f"parameters.tile_overlap: expected a number 0..0.75; got {overlap!r}",
            field="parameters.tile_overlap",
        )
    if not encoded:
        if spec not in (None, "off"):
            raise BadRequest(
                f"parameters.tiling applies to encoded images ({BYTES_INPUT!r}); network-sized images are "
                "already tiles",
                field="parameters.tiling",
            )
        return Tiling()
    return tiling_options(
        settings,
        model_tiling,
        spec,
        None if overlap is None else float(overlap),
        field="parameters.tiling",
        overlap_field="parameters.tile_overlap",
    )

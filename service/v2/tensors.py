"""Inference request bodies in, response bodies out (JSON tensors and the binary tensor data extension).

A request body is the JSON request; with ``Inference-Header-Content-Length: N`` its first N bytes are
the JSON and the rest is the binary section, holding the inputs whose ``parameters.binary_data_size``
is set, in input order. Binary tensors are raw little-endian row-major values; a BYTES element is a
4-byte little-endian length followed by its bytes. In JSON, BYTES elements (encoded images) are base64
strings.

A response carries each requested output as JSON ``data`` or, when the output's ``binary_data``
parameter (or the request's ``binary_data_output``) is true, in the binary section after the JSON,
whose length the ``Inference-Header-Content-Length`` response header gives.

Every malformed request is a `BadRequest` naming the offending part (``inputs[0].shape``, ...).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from contract.manifest import InputSpec
from service.errors import BadRequest
from service.v2.schemas import InferRequest, RequestInput
from service.v2.signature import BYTES_INPUT, OUTPUT_DATATYPES

HEADER_LENGTH = "Inference-Header-Content-Length"
NUMPY_DTYPES = {"INT32": np.dtype("<i4"), "FP32": np.dtype("<f4")}


@dataclass
class DecodedRequest:
    """What one inference request asks: network-sized images or encoded ones, and which outputs."""

    request_id: str | None
    images: np.ndarray | None  # uint8 [B, H, W, 3]
    encoded: list[bytes] | None  # B encoded images
    outputs: list[tuple[str, bool]]  # (output name, as binary), in the order asked
    parameters: dict[str, Any] = field(default_factory=dict)  # the request's own parameters

    @property
    def count(self) -> int:
        return len(self.images) if self.images is not None else len(self.encoded or [])


def header_length(value: str | None, body_length: int) -> int | None:
    """The JSON part's length from the ``Inference-Header-Content-Length`` header (None: whole body)."""
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) > body_length:
        raise BadRequest(
            f"{HEADER_LENGTH} must be the JSON part's length, 0..{body_length} bytes; got {value!r}",
            field=HEADER_LENGTH.lower(),
        )
    return int(value)


def decode_request(
    body: bytes | bytearray,
    json_length: int | None,
    spec: InputSpec,
    outputs: tuple[str, ...],
    max_images: int,
) -> DecodedRequest:
    """Parse and check a request for a model with input ``spec`` and contract ``outputs``.

    Runs in a worker thread: JSON tensors of network-sized images are large.
    """
    view = memoryview(body)
    header = body if json_length is None else bytes(view[:json_length])
    try:
        request = InferRequest.model_validate_json(header)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadRequest(f"invalid inference request: {where}: {first['msg']}", field=where) from None
    binary = view[json_length:] if json_length is not None else view[:0]
    raw = _binary_part(_one_input(request, spec), binary)
    return decode_inference(request, raw, spec, outputs, max_images)


def decode_inference(
    request: InferRequest,
    raw: memoryview | bytes | None,
    spec: InputSpec,
    outputs: tuple[str, ...],
    max_images: int,
) -> DecodedRequest:
    """Check a parsed request's one input against the model (``spec``, contract ``outputs``): its values
    are ``raw`` bytes (the binary format) when given, else the input's ``data``. Every protocol's
    requests go through here (REST's JSON and binary bodies, gRPC's messages)."""
    tensor = _one_input(request, spec)
    view = None if raw is None else memoryview(raw)
    images = encoded = None
    if tensor.name == spec.name:
        images = _image_tensor(tensor, view, spec, max_images)
    elif tensor.name == BYTES_INPUT:
        encoded = _bytes_tensor(tensor, view, max_images)
    else:
        raise BadRequest(
            f"unknown input {tensor.name!r}; this model takes {spec.name!r} (UINT8 [-1, {spec.height}, "
            f"{spec.width}, 3]) or {BYTES_INPUT!r} (BYTES [-1] or [-1, 1], encoded images)",
            field="inputs[0].name",
        )
    return DecodedRequest(
        request.id, images, encoded, _requested_outputs(request, outputs), request.parameters
    )


def _one_input(request: InferRequest, spec: InputSpec) -> RequestInput:
    if len(request.inputs) != 1:
        raise BadRequest(
            f"send exactly one input ({spec.name!r} or {BYTES_INPUT!r}); got {len(request.inputs)}",
            field="inputs",
        )
    return request.inputs[0]


def _binary_part(tensor: RequestInput, binary: memoryview) -> memoryview | None:
    size = tensor.parameters.get("binary_data_size")
    if size is None:
        if len(binary):
            raise BadRequest(
                f"{len(binary)} bytes of binary data follow the JSON, but no input has binary_data_size",
                field="inputs[0].parameters",
            )
        return None
    if not isinstance(size, int) or size < 0 or size != len(binary):
        raise BadRequest(
            f"inputs[0] has binary_data_size {size!r}, but {len(binary)} bytes follow the JSON",
            field="inputs[0].parameters.binary_data_size",
        )
    if tensor.data is not None:
        raise BadRequest("inputs[0] has both JSON data and binary_data_size", field="inputs[0].data")
    return binary


def _check_batch(tensor: RequestInput, expected: str, dims_ok: bool, max_images: int) -> int:
    if not dims_ok:
        raise BadRequest(
            f"input {tensor.name!r} must have shape {expected}; got {tensor.shape}", field="inputs[0].shape"
        )
    batch = tensor.shape[0]
    if not 1 <= batch <= max_images:
        raise BadRequest(
            f"input {tensor.name!r} holds {batch} images; one request takes 1..{max_images}",
            field="inputs[0].shape",
        )
    return batch


def _image_tensor(
    tensor: RequestInput, raw: memoryview | None, spec: InputSpec, max_images: int
) -> np.ndarray:
    if tensor.datatype != "UINT8":
        raise BadRequest(
            f"input {tensor.name!r} is UINT8 RGB at the network size; got datatype {tensor.datatype!r} "
            f"(send encoded images as {BYTES_INPUT!r} instead)",
            field="inputs[0].datatype",
        )
    shape = tensor.shape
    expected = f"[B, {spec.height}, {spec.width}, 3]"
    _check_batch(tensor, expected, len(shape) == 4 and shape[1:] == [spec.height, spec.width, 3], max_images)
    count = math.prod(shape)
    if raw is not None:
        if len(raw) != count:
            raise BadRequest(
                f"input {tensor.name!r} of shape {shape} needs {count} bytes; got {len(raw)}",
                field="inputs[0].parameters.binary_data_size",
            )
        return np.frombuffer(raw, dtype=np.uint8).reshape(shape)
    if tensor.data is None:
        raise BadRequest(f"input {tensor.name!r} has no data", field="inputs[0].data")
    try:
        values = np.asarray(tensor.data, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        raise BadRequest(
            f"input {tensor.name!r}: data must be a (flat or nested) list of integers 0..255",
            field="inputs[0].data",
        ) from None
    if values.size != count or values.min(initial=0) < 0 or values.max(initial=0) > 255:
        raise BadRequest(
            f"input {tensor.name!r} of shape {shape} needs {count} integers 0..255; got {values.size} "
            f"values in {values.min(initial=0)}..{values.max(initial=0)}",
            field="inputs[0].data",
        )
    return values.astype(np.uint8).reshape(shape)


def _bytes_tensor(tensor: RequestInput, raw: memoryview | None, max_images: int) -> list[bytes]:
    if tensor.datatype != "BYTES":
        raise BadRequest(
            f"input {BYTES_INPUT!r} holds encoded images as BYTES; got datatype {tensor.datatype!r}",
            field="inputs[0].datatype",
        )
    shape = tensor.shape
    batch = _check_batch(tensor, "[B] or [B, 1]", len(shape) == 1 or shape[1:] == [1], max_images)
    if raw is not None:
        elements = _split_bytes(raw)
    elif isinstance(tensor.data, list):
        flat = [e for row in tensor.data for e in (row if isinstance(row, list) else [row])]
        elements = [_base64(element, i) for i, element in enumerate(flat)]
    else:
        raise BadRequest(f"input {BYTES_INPUT!r} has no data", field="inputs[0].data")
    if len(elements) != batch:
        raise BadRequest(
            f"input {BYTES_INPUT!r} of shape {shape} needs {batch} elements; got {len(elements)}",
            field="inputs[0].data",
        )
    return elements


def _split_bytes(raw: memoryview) -> list[bytes]:
    """BYTES elements of the binary format: each a 4-byte little-endian length, then its bytes."""
    elements: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise BadRequest("binary BYTES data ends inside a length prefix", field="inputs[0]")
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise BadRequest(
                f"binary BYTES element {len(elements)} claims {length} bytes; "
                f"only {len(raw) - offset} remain",
                field="inputs[0]",
            )
        elements.append(bytes(raw[offset : offset + length]))
        offset += length
    return elements


def _base64(element: Any, index: int) -> bytes:
    if not isinstance(element, str):
        raise BadRequest(
            f"{BYTES_INPUT}[{index}] must be a base64 string in JSON", field=f"{BYTES_INPUT}[{index}]"
        )
    try:
        return base64.b64decode(element, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            f"{BYTES_INPUT}[{index}] is not base64 (encoded images in JSON are base64 strings; or send them "
            "as binary data)",
            field=f"{BYTES_INPUT}[{index}]",
        ) from None


def _requested_outputs(request: InferRequest, available: tuple[str, ...]) -> list[tuple[str, bool]]:
    default_binary = request.parameters.get("binary_data_output", False)
    if not isinstance(default_binary, bool):
        raise BadRequest("parameters.binary_data_output must be true or false", field="parameters")
    if request.outputs is None:
        return [(name, default_binary) for name in available]
    requested: list[tuple[str, bool]] = []
    for i, output in enumerate(request.outputs):
        if output.name not in available:
            raise BadRequest(
                f"unknown output {output.name!r}; this model has {list(available)}",
                field=f"outputs[{i}].name",
            )
        if "classification" in output.parameters:
            raise BadRequest(
                "the classification extension is not supported", field=f"outputs[{i}].parameters"
            )
        binary = output.parameters.get("binary_data", default_binary)
        if not isinstance(binary, bool):
            raise BadRequest(
                "binary_data must be true or false", field=f"outputs[{i}].parameters.binary_data"
            )
        requested.append((output.name, binary))
    return requested


def encode_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    outputs: dict[str, np.ndarray],
    requested: list[tuple[str, bool]],
) -> tuple[bytes, int | None]:
    """The response body, and the JSON part's length when a binary section follows (else None)."""
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, binary in requested:
        value = np.ascontiguousarray(outputs[name], dtype=NUMPY_DTYPES[OUTPUT_DATATYPES[name]])
        entry: dict[str, Any] = {"name": name, "datatype": OUTPUT_DATATYPES[name], "shape": list(value.shape)}
        if binary:
            data = value.tobytes()
            entry["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            entry["data"] = value.ravel().tolist()
        entries.append(entry)
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        response["id"] = request_id
    response["outputs"] = entries
    header = json.dumps(response, separators=(",", ":")).encode()
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)

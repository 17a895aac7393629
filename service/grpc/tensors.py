"""gRPC inference messages in and out, checked by the same code as the REST protocol's bodies.

A `ModelInferRequest` becomes the REST request's parsed form (`service.v2.schemas.InferRequest`) and its one
input's values: ``raw_input_contents`` (the binary format: raw little-endian values; BYTES elements each
with a 4-byte length prefix) or the typed ``contents`` (``uint_contents`` for UINT8, ``bytes_contents`` for
BYTES). `service.v2.tensors.decode_inference` then checks it exactly as it checks a REST body, with the
same messages. Outputs always come back as ``raw_output_contents`` (what tritonclient.grpc reads).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from pydantic import ValidationError

from contract.manifest import InputSpec
from service.errors import BadRequest
from service.grpc.proto import oip_pb2 as pb
from service.v2.schemas import InferRequest, RequestInput, RequestOutput
from service.v2.signature import OUTPUT_DATATYPES
from service.v2.tensors import NUMPY_DTYPES, DecodedRequest, decode_inference


def parameter_values(parameters: Any) -> dict[str, Any]:
    """A protocol ``map<string, InferParameter>`` as plain values."""
    values: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        values[key] = None if choice is None else getattr(parameter, choice)
    return values


def decode_grpc_request(
    request: pb.ModelInferRequest, spec: InputSpec, outputs: tuple[str, ...], max_images: int
) -> DecodedRequest:
    """Parse and check ``request`` for a model with input ``spec`` and contract ``outputs``.

    Runs in a worker thread: typed contents of network-sized images are large."""
    raws = request.raw_input_contents
    if raws and len(raws) != len(request.inputs):
        raise BadRequest(
            f"raw_input_contents holds {len(raws)} entries for {len(request.inputs)} inputs",
            field="raw_input_contents",
        )
    inputs: list[RequestInput] = []
    raw: bytes | None = raws[0] if raws else None
    try:
        for tensor in request.inputs:
            data, typed_raw = _typed_contents(tensor, raw is not None)
            raw = typed_raw if typed_raw is not None else raw
            inputs.append(
                RequestInput(
                    name=tensor.name,
                    shape=list(tensor.shape),
                    datatype=tensor.datatype,
                    parameters=parameter_values(tensor.parameters),
                    data=data,
                )
            )
        parsed = InferRequest(
            id=request.id or None,
            parameters=parameter_values(request.parameters),
            inputs=inputs,
            outputs=[
                RequestOutput(name=output.name, parameters=parameter_values(output.parameters))
                for output in request.outputs
            ]
            or None,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "request"
        raise BadRequest(f"invalid inference request: {where}: {first['msg']}", field=where) from None
    return decode_inference(parsed, raw, spec, outputs, max_images)


def _typed_contents(
    tensor: pb.ModelInferRequest.InferInputTensor, has_raw: bool
) -> tuple[np.ndarray | None, bytes | None]:
    """An input's typed contents: UINT8 values as data, or BYTES elements in the binary format."""
    if not tensor.HasField("contents"):
        return None, None
    if has_raw:
        raise BadRequest(
            f"input {tensor.name!r} has both raw_input_contents and typed contents",
            field="inputs[0].contents",
        )
    contents = tensor.contents
    if tensor.datatype == "BYTES":
        elements = list(contents.bytes_contents)
        return None, b"".join(struct.pack("<I", len(element)) + element for element in elements)
    if len(contents.uint_contents):
        return np.asarray(contents.uint_contents, dtype=np.int64), None
    return None, None


def encode_grpc_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    outputs: dict[str, np.ndarray],
    requested: list[tuple[str, bool]],
) -> pb.ModelInferResponse:
    """The response: each requested output's metadata, its values in ``raw_output_contents``."""
    response = pb.ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id or "")
    for name, _ in requested:  # the REST binary_data flag does not apply: raw contents always
        value = np.ascontiguousarray(outputs[name], dtype=NUMPY_DTYPES[OUTPUT_DATATYPES[name]])
        response.outputs.add(name=name, datatype=OUTPUT_DATATYPES[name], shape=list(value.shape))
        response.raw_output_contents.append(value.tobytes())
    return response

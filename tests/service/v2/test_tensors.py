"""Open Inference Protocol bodies: JSON and binary tensors in, JSON and binary outputs out, clear 400s."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import numpy as np
import pytest

from contract.manifest import OUTPUT_NAMES, InputSpec
from service.errors import BadRequest
from service.v2.tensors import decode_request, encode_response, header_length

SPEC = InputSpec(height=4, width=5)


def body_of(request: dict[str, Any], binary: bytes = b"") -> tuple[bytes, int | None]:
    header = json.dumps(request).encode()
    return header + binary, (len(header) if binary else None)


def decode(request: dict[str, Any], binary: bytes = b"", max_images: int = 4) -> Any:
    body, length = body_of(request, binary)
    return decode_request(body, length, SPEC, OUTPUT_NAMES, max_images)


def image_input(batch: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": "images", "shape": [batch, 4, 5, 3], "datatype": "UINT8", **extra}


def test_json_image_tensor_flat_or_nested() -> None:
    pixels = np.arange(2 * 4 * 5 * 3).reshape(2, 4, 5, 3).astype(np.uint8)
    flat = decode({"id": "a", "inputs": [image_input(2, data=pixels.ravel().tolist())]})
    nested = decode({"inputs": [image_input(2, data=pixels.tolist())]})
    assert flat.request_id == "a" and flat.count == 2
    np.testing.assert_array_equal(flat.images, pixels)
    np.testing.assert_array_equal(nested.images, pixels)
    assert flat.outputs == [(name, False) for name in OUTPUT_NAMES]  # all, as JSON, by default


def test_binary_image_tensor() -> None:
    pixels = np.full((1, 4, 5, 3), 7, dtype=np.uint8)
    request = {"inputs": [image_input(1, parameters={"binary_data_size": pixels.nbytes})]}
    decoded = decode(request, pixels.tobytes())
    np.testing.assert_array_equal(decoded.images, pixels)


def test_bytes_input_binary_and_base64() -> None:
    images = [b"\x89PNG first", b"second image"]
    packed = b"".join(struct.pack("<I", len(i)) + i for i in images)
    binary = decode(
        {
            "inputs": [
                {
                    "name": "image_bytes",
                    "shape": [2, 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(packed)},
                }
            ]
        },
        packed,
    )
    assert binary.encoded == images and binary.images is None
    as_json = decode(
        {
            "inputs": [
                {
                    "name": "image_bytes",
                    "shape": [2],
                    "datatype": "BYTES",
                    "data": [base64.b64encode(i).decode() for i in images],
                }
            ]
        }
    )
    assert as_json.encoded == images


def test_requested_outputs_and_binary_flags() -> None:
    request = {
        "parameters": {"binary_data_output": True},
        "inputs": [image_input(data=[0] * 60)],
        "outputs": [
            {"name": "detection_scores"},
            {"name": "num_detections", "parameters": {"binary_data": False}},
        ],
    }
    assert decode(request).outputs == [("detection_scores", True), ("num_detections", False)]


@pytest.mark.parametrize(
    ("request_", "binary", "field", "message"),
    [
        ({"inputs": []}, b"", "inputs", "at least 1 item"),
        (
            {"inputs": [image_input(data=[0] * 60), image_input(data=[0] * 60)]},
            b"",
            "inputs",
            "exactly one input",
        ),
        (
            {"inputs": [{**image_input(data=[0] * 60), "name": "pixels"}]},
            b"",
            "inputs[0].name",
            "unknown input 'pixels'",
        ),
        (
            {"inputs": [{**image_input(data=[0] * 60), "datatype": "FP32"}]},
            b"",
            "inputs[0].datatype",
            "UINT8",
        ),
        (
            {"inputs": [{**image_input(data=[0] * 60), "shape": [1, 5, 4, 3]}]},
            b"",
            "inputs[0].shape",
            "[B, 4, 5, 3]",
        ),
        ({"inputs": [image_input(5, data=[0] * 300)]}, b"", "inputs[0].shape", "1..4"),
        ({"inputs": [image_input(data=[0] * 59)]}, b"", "inputs[0].data", "needs 60 integers"),
        ({"inputs": [image_input(data=[256] * 60)]}, b"", "inputs[0].data", "0..256"),
        ({"inputs": [image_input(data=["x"] * 60)]}, b"", "inputs[0].data", "list of integers"),
        ({"inputs": [image_input()]}, b"", "inputs[0].data", "no data"),
        (
            {"inputs": [image_input(parameters={"binary_data_size": 60})]},
            b"x" * 59,
            "inputs[0].parameters.binary_data_size",
            "but 59 bytes follow",
        ),
        (
            {"inputs": [image_input(data=[0] * 60)], "outputs": [{"name": "logits"}]},
            b"",
            "outputs[0].name",
            "unknown output 'logits'",
        ),
        (
            {"inputs": [{"name": "image_bytes", "shape": [1], "datatype": "BYTES", "data": ["%%%"]}]},
            b"",
            "image_bytes[0]",
            "not base64",
        ),
        (
            {"inputs": [{"name": "image_bytes", "shape": [2], "datatype": "BYTES", "data": ["AA=="]}]},
            b"",
            "inputs[0].data",
            "needs 2 elements",
        ),
    ],
)
def test_bad_requests_name_the_offending_part(
    request_: dict[str, Any], binary: bytes, field: str, message: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        decode(request_, binary)
    assert caught.value.field == field
    assert message in caught.value.message


def test_truncated_binary_bytes_element() -> None:
    packed = struct.pack("<I", 100) + b"short"
    request = {
        "inputs": [
            {
                "name": "image_bytes",
                "shape": [1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(packed)},
            }
        ]
    }
    with pytest.raises(BadRequest, match="claims 100 bytes; only 5 remain"):
        decode(request, packed)


def test_malformed_json_and_header_length() -> None:
    with pytest.raises(BadRequest, match="invalid inference request"):
        decode_request(b"{not json", None, SPEC, OUTPUT_NAMES, 4)
    with pytest.raises(BadRequest, match="Inference-Header-Content-Length"):
        header_length("12", 5)
    assert header_length(None, 5) is None and header_length("5", 5) == 5


def test_encode_response_json_and_binary() -> None:
    outputs = {
        "num_detections": np.array([[2]], dtype=np.int32),
        "detection_scores": np.array([[0.5, 0.25]], dtype=np.float32),
    }
    body, length = encode_response(
        "m", "1", "r", outputs, [("num_detections", False), ("detection_scores", True)]
    )
    assert length is not None
    header = json.loads(body[:length])
    assert header["model_name"] == "m" and header["model_version"] == "1" and header["id"] == "r"
    assert header["outputs"][0] == {
        "name": "num_detections",
        "datatype": "INT32",
        "shape": [1, 1],
        "data": [2],
    }
    assert header["outputs"][1]["parameters"] == {"binary_data_size": 8}
    np.testing.assert_array_equal(np.frombuffer(body[length:], dtype="<f4"), [0.5, 0.25])
    only_json, none = encode_response("m", "1", None, outputs, [("detection_scores", False)])
    assert none is None and json.loads(only_json)["outputs"][0]["data"] == [0.5, 0.25]

"""Helpers of the Open Inference Protocol tests: send a request, read every output of a response."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
from fastapi.testclient import TestClient


def infer(
    client: TestClient, model: str, request: dict[str, Any], binary: bytes = b"", **headers: str
) -> Any:
    header = json.dumps(request).encode()
    if binary:
        headers["Inference-Header-Content-Length"] = str(len(header))
    return client.post(f"/v2/models/{model}/infer", content=header + binary, headers=headers)


def outputs_of(response: Any) -> dict[str, np.ndarray]:
    """Every output of a v2 response as an array, whether sent as JSON or in the binary section."""
    length = response.headers.get("inference-header-content-length")
    content = response.content
    header = json.loads(content[: int(length)] if length else content)
    offset = int(length or 0)
    arrays: dict[str, np.ndarray] = {}
    for output in header["outputs"]:
        dtype = {"INT32": "<i4", "FP32": "<f4"}[output["datatype"]]
        if "data" in output:
            arrays[output["name"]] = np.array(output["data"], dtype=dtype).reshape(output["shape"])
        else:
            size = output["parameters"]["binary_data_size"]
            chunk = content[offset : offset + size]
            arrays[output["name"]] = np.frombuffer(chunk, dtype=dtype).reshape(output["shape"])
            offset += size
    return arrays


def bytes_request(images: list[bytes]) -> tuple[dict[str, Any], bytes]:
    packed = b"".join(struct.pack("<I", len(i)) + i for i in images)
    tensor = {"name": "image_bytes", "shape": [len(images), 1], "datatype": "BYTES"}
    tensor["parameters"] = {"binary_data_size": len(packed)}
    return {"inputs": [tensor], "parameters": {"binary_data_output": True}}, packed

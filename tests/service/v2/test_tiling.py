"""The Open Inference Protocol's encoded images, tiled by the request's ``tiling`` parameter: the same
merged detections as /detect's, padded to the artifact's K rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from detect_testkit import MakeClient
from fastapi.testclient import TestClient
from service_testkit import encode, solid_image
from v2_testkit import bytes_request, infer, outputs_of

IMAGE = encode(solid_image(220, height=128, width=192))


@pytest.fixture
def client(make_client: MakeClient, toy_repo: Path) -> TestClient:
    return make_client(toy_repo, max_tiles_per_request=16)


def _tiled(parameters: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    request, binary = bytes_request([IMAGE])
    request["parameters"] |= parameters
    return request, binary


def test_tiled_outputs_equal_detects(client: TestClient) -> None:
    request, binary = _tiled({"tiling": "64x64", "tile_overlap": 0})
    out = outputs_of(infer(client, "toy", request, binary))
    detect = client.post(
        "/detect",
        params={"tiling": "64x64", "tile_overlap": 0, "score_threshold": 0.05, "max_detections": 4},
        content=IMAGE,
        headers={"content-type": "image/png"},
    ).json()
    n = int(out["num_detections"][0, 0])
    assert n == len(detect["detections"]) == 4  # merged, then cut to the artifact's K rows
    assert out["detection_boxes"].shape == (1, 4, 4)
    theirs = np.array([[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in detect["detections"]])
    np.testing.assert_allclose(out["detection_boxes"][0, :n], theirs, atol=0.01)
    np.testing.assert_allclose(
        out["detection_scores"][0, :n], [d["score"] for d in detect["detections"]], atol=1e-4
    )
    untiled = outputs_of(infer(client, "toy", *bytes_request([IMAGE])))
    assert not np.array_equal(untiled["detection_boxes"], out["detection_boxes"])


@pytest.mark.parametrize(
    "parameters, field, fragment",
    [
        ({"tiling": "1x1"}, "parameters.tiling", "tile sides must be 32..8192"),
        ({"tiling": 5}, "parameters.tiling", "expected a string"),
        ({"tiling": "64x64", "tile_overlap": 1}, "parameters.tile_overlap", "0..0.75"),
        ({"tiling": "64x64", "tile_overlap": "a"}, "parameters.tile_overlap", "expected a number"),
        ({"tiling": "32x32"}, "tiling", "at most 16 network inputs"),
    ],
)
def test_bad_tiling_parameters(
    client: TestClient, parameters: dict[str, Any], field: str, fragment: str
) -> None:
    response = infer(client, "toy", *_tiled(parameters))
    assert response.status_code in (400, 413), response.text
    assert response.json()["field"] == field and fragment in response.json()["error"]


def test_network_sized_images_are_not_tiled(client: TestClient) -> None:
    image = solid_image(9)
    request = {
        "inputs": [
            {"name": "images", "shape": [1, 64, 64, 3], "datatype": "UINT8", "data": image.ravel().tolist()}
        ],
        "parameters": {"tiling": "auto"},
    }
    response = infer(client, "toy", request)
    assert (
        response.status_code == 400 and "network-sized images are already tiles" in response.json()["error"]
    )

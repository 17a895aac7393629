"""A rollout holds for every protocol that runs inference: the Open Inference Protocol's infer (encoded
images and network-sized tensors) is canaried and shadowed like /detect; the rollout routes need the key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_testkit import add_toy_model, encode, solid_image, wait_until
from v2_testkit import bytes_request, infer

MakeClient = Callable[..., TestClient]
ROLLOUT = "/v2/repository/models/toy/rollout"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    add_toy_model(tmp_path, "toy", "1")
    add_toy_model(tmp_path, "toy", "2")
    return tmp_path


def metric(client: TestClient, series: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")


def version_of(response: object) -> str:
    body = json.loads(response.content)  # type: ignore[attr-defined]
    return str(body["model_version"])


def test_open_inference_protocol_requests_are_canaried_and_shadowed(
    make_client: MakeClient, repo: Path
) -> None:
    client = make_client(repo, repository_api=True)  # version 2 serves
    assert client.post(ROLLOUT, json={"candidate": "1", "canary_percent": 100}).status_code == 200
    request, packed = bytes_request([encode(solid_image(200))])
    request["parameters"] = {}  # JSON outputs
    assert version_of(infer(client, "toy", request, packed)) == "1"

    assert client.post(ROLLOUT, json={"candidate": "1", "shadow_percent": 100}).status_code == 200
    assert version_of(infer(client, "toy", request, packed)) == "2"
    pixels = np.full((1, 64, 64, 3), 200, np.uint8)
    tensors = {"inputs": [{"name": "images", "shape": [1, 64, 64, 3], "datatype": "UINT8"}]}
    tensors["inputs"][0]["data"] = pixels.ravel().tolist()
    response = infer(client, "toy", tensors)
    assert response.status_code == 200 and version_of(response) == "2"
    compared = 'detect_shadow_requests_total{model="toy",result="compared"}'
    wait_until(lambda: metric(client, compared) == 2, what="both copies (encoded, tensors) compared")
    assert metric(client, 'detect_shadow_agreement_sum{model="toy"}') == 2.0  # two copies of one model

    assert client.post(ROLLOUT + "/end").status_code == 200
    assert version_of(infer(client, "toy", request, packed)) == "2"


def test_the_rollout_routes_need_the_api_key(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True, api_keys="k-one")
    assert client.post(ROLLOUT, json={"candidate": "1"}).status_code == 401
    assert client.post(ROLLOUT + "/end").status_code == 401
    keyed = {"Authorization": "Bearer k-one"}
    assert client.post(ROLLOUT, json={"candidate": "1"}, headers=keyed).status_code == 200
    assert client.post(ROLLOUT + "/end", headers=keyed).status_code == 200

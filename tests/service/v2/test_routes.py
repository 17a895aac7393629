"""Open Inference Protocol routes over real (toy) ONNX models: metadata, config, health, inference in
JSON and binary form, the same answers as /detect, errors, API keys and metrics."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_testkit import TOY_BOXES, encode, solid_image
from v2_testkit import bytes_request, infer, outputs_of

MakeClient = Callable[..., TestClient]


def test_server_metadata_and_health(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo, repository_api=True)
    assert client.get("/v2").json() == {
        "name": "detect",
        "version": client.app.version,  # type: ignore[attr-defined]
        "extensions": ["binary_tensor_data", "model_configuration", "model_repository"],
    }
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").json() == {"ready": True}
    assert client.get("/v2/models/masks/ready").json() == {"name": "masks", "ready": True}


def test_repository_api_is_off_unless_asked_for(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo)
    assert "model_repository" not in client.get("/v2").json()["extensions"]
    assert client.post("/v2/repository/index").status_code == 404
    assert client.post("/v2/repository/models/toy/unload").status_code == 404


def test_model_metadata_and_config(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo, versions="all")
    metadata = client.get("/v2/models/a-stretch").json()
    assert metadata["versions"] == ["1", "2"] and metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [
        {"name": "images", "datatype": "UINT8", "shape": [-1, 64, 64, 3]},
        {"name": "image_bytes", "datatype": "BYTES", "shape": [-1, 1]},
    ]
    assert client.get("/v2/models/a-stretch/versions/1").json()["name"] == "a-stretch"
    masks = client.get("/v2/models/masks").json()["outputs"]
    assert {"name": "detection_masks", "datatype": "FP32", "shape": [-1, 4, 8, 8]} in masks
    config = client.get("/v2/models/letterbox/config").json()
    assert config["max_batch_size"] == 8
    assert config["input"][0] == {
        "name": "images",
        "data_type": "TYPE_UINT8",
        "format": "FORMAT_NHWC",
        "dims": [48, 64, 3],
    }
    assert config["input"][1]["optional"] is True
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("num_detections", "TYPE_INT32", [1]),
        ("detection_boxes", "TYPE_FP32", [4, 4]),
        ("detection_scores", "TYPE_FP32", [4]),
        ("detection_classes", "TYPE_INT32", [4]),
    ]
    assert client.get("/v2/models/fixed/config").json()["max_batch_size"] == 4


def test_json_tensor_inference_returns_the_contract(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo)
    pixels = np.stack([solid_image(255), solid_image(51)])
    request = {
        "id": "r1",
        "inputs": [
            {
                "name": "images",
                "shape": list(pixels.shape),
                "datatype": "UINT8",
                "data": pixels.ravel().tolist(),
            }
        ],
    }
    response = infer(client, "toy", request)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert (body["model_name"], body["model_version"], body["id"]) == ("toy", "1", "r1")
    out = outputs_of(response)
    assert out["num_detections"].tolist() == [[3], [2]]  # bright image: 3 valid rows, dark: 2
    np.testing.assert_allclose(out["detection_scores"][:, 0], [1.0, 0.2], atol=1e-6)
    np.testing.assert_allclose(out["detection_boxes"][0], TOY_BOXES)  # normalized to the network input
    assert out["detection_classes"].dtype == np.int32


def test_encoded_images_match_detect_in_original_pixels(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo)
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, size=(100, 200, 3), dtype=np.uint8)
    png = encode(image)
    request, packed = bytes_request([png])
    response = infer(client, "letterbox", request, packed)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    out = outputs_of(response)
    detect = client.post("/detect?model=letterbox", content=png, headers={"content-type": "image/png"}).json()
    n = int(out["num_detections"][0, 0])
    kept = [i for i in range(n) if out["detection_scores"][0, i] >= 0.05]
    assert len(kept) == len(detect["detections"]) > 0
    for i, det in zip(kept, detect["detections"], strict=True):
        box = det["box"]
        np.testing.assert_allclose(
            out["detection_boxes"][0, i], [box["x1"], box["y1"], box["x2"], box["y2"]], atol=0.01
        )
        assert out["detection_scores"][0, i] == pytest.approx(det["score"], abs=1e-5)
        assert out["detection_classes"][0, i] == det["class_id"]
    as_json = infer(
        client,
        "letterbox",
        {
            "inputs": [
                {
                    "name": "image_bytes",
                    "shape": [1],
                    "datatype": "BYTES",
                    "data": [base64.b64encode(png).decode()],
                }
            ]
        },
    )
    np.testing.assert_allclose(outputs_of(as_json)["detection_boxes"], out["detection_boxes"])


def test_requested_outputs_only_and_masks(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo)
    request, packed = bytes_request([encode(solid_image(200))])
    request["outputs"] = [
        {"name": "detection_masks", "parameters": {"binary_data": True}},
        {"name": "num_detections", "parameters": {"binary_data": False}},
    ]
    out = outputs_of(infer(client, "masks", request, packed))
    assert list(out) == ["detection_masks", "num_detections"]
    assert out["detection_masks"].shape == (1, 4, 8, 8)


def test_version_in_the_path(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo, versions="all")
    request, packed = bytes_request([encode(solid_image(9))])
    header = json.dumps(request).encode()
    response = client.post(
        "/v2/models/a-stretch/versions/1/infer",
        content=header + packed,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert response.status_code == 200
    length = int(response.headers["inference-header-content-length"])
    assert json.loads(response.content[:length])["model_version"] == "1"


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "message"),
    [
        ("/v2/models/nope/infer", b"{}", {}, 404, "unknown model 'nope'"),
        ("/v2/models/toy/versions/9/infer", b"{}", {}, 404, "no loaded version '9'"),
        ("/v2/models/toy/infer", b"{oops", {}, 400, "invalid inference request"),
        ("/v2/models/toy/infer", b"{}", {"content-encoding": "gzip"}, 415, "Content-Encoding 'gzip'"),
        ("/v2/models/toy/infer", b"{}", {"inference-header-content-length": "99"}, 400, "0..2 bytes"),
    ],
)
def test_errors_are_protocol_bodies(
    client: TestClient, path: str, body: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    response = client.post(path, content=body, headers=headers)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]


def test_unknown_model_metadata_is_404(client: TestClient) -> None:
    for path in ("/v2/models/nope", "/v2/models/nope/ready", "/v2/models/nope/config"):
        assert client.get(path).status_code == 404


def test_api_keys_guard_inference_and_repository_not_health(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, api_keys="s3cret", repository_api=True)
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/models/toy").status_code == 401
    assert client.post("/v2/models/toy/infer", content=b"{}").status_code == 401
    assert client.post("/v2/repository/index").status_code == 401
    assert client.post("/v2/repository/models/toy/unload").status_code == 401
    assert client.post("/v2/repository/index", headers={"x-api-key": "s3cret"}).status_code == 200


def test_inference_is_counted_in_the_request_metrics(client: TestClient) -> None:
    request, packed = bytes_request([encode(solid_image(9))])
    assert infer(client, "toy", request, packed).status_code == 200
    assert infer(client, "nope", request, packed).status_code == 404
    text = client.get("/metrics").text
    assert 'detect_requests_total{code="200",model="toy"} 1.0' in text
    assert 'detect_requests_total{code="404",model="none"} 1.0' in text
    assert 'detect_batch_size_count{model="toy"} 1.0' in text


def test_the_native_limits_apply(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(
        toy_repo, image_memory_bytes=200_000, max_body_bytes=60_000, max_images_per_request=2
    )
    pixels = solid_image(7)[None]
    request = {
        "inputs": [
            {"name": "images", "shape": [1, 64, 64, 3], "datatype": "UINT8", "data": pixels.ravel().tolist()}
        ]
    }
    too_costly = infer(client, "toy", request)  # ~25 kB of JSON holds ~0.6 MB of image memory to parse
    assert too_costly.status_code == 413 and "image memory" in too_costly.json()["error"]
    big = infer(
        client, "toy", {"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["A" * 70_000]}]}
    )
    assert big.status_code == 413 and "the limit is 60000" in big.json()["error"]
    request, packed = bytes_request([encode(solid_image(9))] * 3)
    too_many = infer(client, "toy", request, packed)
    assert too_many.status_code == 400 and "1..2" in too_many.json()["error"]
    huge = encode(np.zeros((1000, 1000, 3), np.uint8))
    request, packed = bytes_request([huge])
    assert infer(client, "toy", request, packed).status_code == 413  # 3 MB of decoded image memory

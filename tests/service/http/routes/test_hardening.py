"""Limits and admission through the app: request pixels, memory budgets, expected-wait 429s, hostile
images, and the OpenAPI contract of the error bodies."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from service_testkit import GatedFactory, encode, solid_image

MakeClient = Callable[..., TestClient]


def post(client: TestClient, data: bytes, content_type: str = "image/png", **params: Any) -> Any:
    return client.post("/detect", params=params, content=data, headers={"content-type": content_type})


def lying_jpeg(width: int = 6000, height: int = 6000) -> bytes:
    """A 64x64 JPEG whose frame header claims ``width`` x ``height``: its data ends long before that."""
    data = bytearray(encode(np.full((64, 64, 3), 90, np.uint8), ".jpg"))
    i = 2
    while data[i + 1] not in (0xC0, 0xC2):
        i += 2 + struct.unpack_from(">H", data, i + 2)[0]
    struct.pack_into(">HH", data, i + 5, height, width)
    return bytes(data)


def test_a_jpeg_whose_data_ends_early_is_400_not_a_grey_picture(client: TestClient) -> None:
    response = post(client, lying_jpeg(), "image/jpeg")
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "body"
    assert body["error"].startswith("body: truncated JPEG: its data ends before the 6000x6000 pixels")


def test_the_request_pixel_budget_counts_every_image(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, max_request_pixels=3 * 64 * 64)
    files = [("images", (f"{i}.png", encode(solid_image(9)), "image/png")) for i in range(4)]
    response = client.post("/detect", files=files)
    assert response.status_code == 413
    assert response.json() == {
        "error": "the request's 4 image(s) decode to 16384 pixels; the limit per request is 12288 (send "
        "fewer or smaller images)",
        "field": "images",
    }
    assert client.post("/detect", files=files[:3]).status_code == 200


def test_an_image_larger_than_the_whole_image_budget_is_413(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, image_memory_bytes=100_000)
    big = encode(np.zeros((200, 200, 3), np.uint8))
    response = post(client, big)
    assert response.status_code == 413
    assert "of image memory; the server's whole budget is" in response.json()["error"]
    assert post(client, encode(solid_image(9))).status_code == 200  # 64x64: fits


def test_a_full_body_budget_is_503_with_retry_after(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, body_memory_bytes=50_000, admission_wait_ms=100)
    resources: Any = client.app.state.resources  # type: ignore[attr-defined]
    resources.body_budget.try_acquire(45_000)  # as if other uploads held most of it
    response = post(client, encode(np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert "request body memory in use" in response.json()["error"]
    resources.body_budget.release(45_000)
    assert post(client, encode(solid_image(9))).status_code == 200
    assert resources.body_budget.used == 0 and resources.image_budget.used == 0


def test_large_jpegs_decode_at_reduced_scale_with_boxes_in_original_pixels(client: TestClient) -> None:
    image = np.full((1024, 2048, 3), 200, np.uint8)
    response = post(client, encode(image, ".jpg"), "image/jpeg")
    assert response.status_code == 200
    body = response.json()
    assert (body["width"], body["height"]) == (2048, 1024)
    assert (
        body["detections"][0]["score"] == np.float32(200 / 255).round(3)
        or abs(body["detections"][0]["score"] - 200 / 255) < 0.01
    )
    x2 = max(d["box"]["x2"] for d in body["detections"])
    assert x2 == 2048.0  # the toy boxes reach the right edge of the network input


def test_overload_is_refused_at_once_by_expected_wait(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    client = make_client(toy_repo, max_queue_delay_ms=0, max_batch_size=1, request_timeout_ms=1500)
    backend = gated.backends["toy"]
    backend.gate.clear()
    threading.Timer(0.6, backend.gate.set).start()
    assert post(client, encode(solid_image(10))).status_code == 200  # one batch measured: ~0.6 s
    backend.gate.clear()
    backend.entered.clear()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(post, client, encode(solid_image(20)))
        assert backend.entered.wait(10)
        queued = pool.submit(post, client, encode(solid_image(30)))
        time.sleep(0.2)
        started = time.perf_counter()
        refused = post(client, encode(solid_image(40)))  # 0.4 + 0.6 + 0.6 s > 1.5 s - what it waited
        latency = time.perf_counter() - started
        backend.gate.set()
        assert running.result(10).status_code == 200
        assert queued.result(10).status_code == 200
    assert refused.status_code == 429
    assert latency < 0.2
    assert int(refused.headers["retry-after"]) >= 1
    assert "is overloaded" in refused.json()["error"]
    assert 40 not in [round(v) for call in backend.calls for v in call]


def test_openapi_documents_the_error_bodies_the_service_sends(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    detect = schema["paths"]["/detect"]["post"]
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    for code in ("400", "401", "408", "413", "422", "429", "503", "504"):
        assert detect["responses"][code]["content"]["application/json"]["schema"] == error_ref, code
    images = detect["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]["images"]
    assert images["minItems"] == 1
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    bad = post(client, encode(solid_image(9)), score_threshold=2)
    assert bad.status_code == 422 and set(bad.json()) == {"error", "field"}

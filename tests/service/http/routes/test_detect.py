"""POST /detect end to end over real (toy) ONNX models: answers, batching and response formats.

The toy model scores an image by its mean pixel value (score of row 0 = mean / 255), so every check
of "its own answer" compares a response with the grey level its request sent.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import pytest
from detect_testkit import MakeClient, batcher_of, post_png
from fastapi.testclient import TestClient
from service_testkit import (
    GatedFactory,
    encode,
    solid_image,
    wait_until,
    with_exif_orientation,
)

# ------------------------------------------------------------------------------------------- answers


def test_one_raw_image_returns_one_result_in_original_pixels(client: TestClient) -> None:
    image = solid_image(255, height=100, width=200)
    response = client.post("/detect", content=encode(image, ".jpg"), headers={"content-type": "image/jpeg"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["model"], body["version"], body["width"], body["height"]) == ("toy", "1", 200, 100)
    assert [d["label"] for d in body["detections"]] == [
        "cat",
        "dog",
        "bird",
    ]  # 3 valid rows for a bright image
    assert [d["score"] for d in body["detections"]] == pytest.approx([1.0, 0.9, 0.8], abs=0.01)
    first = body["detections"][0]
    assert first["class_id"] == 0 and "mask" not in first
    assert first["box"] == pytest.approx({"x1": 50.0, "y1": 25.0, "x2": 150.0, "y2": 75.0})  # stretch back


def test_several_images_return_results_in_order(client: TestClient) -> None:
    values = [255, 128, 26]
    files = [("images", (f"img{v}.png", encode(solid_image(v)), "image/png")) for v in values]
    response = client.post("/v1/detect", files=files)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["filename"] for r in results] == ["img255.png", "img128.png", "img26.png"]
    assert [r["detections"][0]["score"] for r in results] == pytest.approx(
        [v / 255 for v in values], abs=1e-3
    )
    assert [len(r["detections"]) for r in results] == [3, 3, 2]  # num_detections depends on brightness


@pytest.mark.parametrize("field", ["image", "file"])
def test_single_file_field_aliases(client: TestClient, field: str) -> None:
    response = client.post("/detect", files={field: ("x.png", encode(solid_image(200)), "image/png")})
    assert response.status_code == 200
    assert response.json()["filename"] == "x.png"


def test_octet_stream_body_and_exif_rotation(client: TestClient) -> None:
    jpeg = with_exif_orientation(encode(solid_image(255, height=40, width=80), ".jpg"), 6)
    response = client.post("/detect", content=jpeg, headers={"content-type": "application/octet-stream"})
    assert response.status_code == 200
    assert (response.json()["width"], response.json()["height"]) == (40, 80)  # as a viewer shows it


def test_query_filters(client: TestClient) -> None:
    # The toy labels declare category ids cat 1, dog 2, bird 3: integers are category ids.
    body = post_png(client, 255, score_threshold=0.85, classes="cat,2,bird").json()
    assert [d["label"] for d in body["detections"]] == ["cat", "dog"]
    assert [(d["class_id"], d["category_id"]) for d in body["detections"]] == [(0, 1), (1, 2)]
    body = post_png(client, 255, classes="bird").json()
    assert [d["label"] for d in body["detections"]] == ["bird"]
    body = post_png(client, 255, max_detections=1).json()
    assert len(body["detections"]) == 1


def test_concurrent_requests_share_a_batch_and_each_gets_its_own_answer(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    # The fixed policy: the batch is whatever waited (the adaptive one decides from batch times, and the
    # gated first batch's time says nothing about the toy model's; its decisions: test_batch_close.py).
    client = make_client(toy_repo, max_batch_size=8, max_queue_delay_ms=0, batch_policy="fixed")
    backend = gated.backends["toy"]
    backend.gate.clear()
    values = [30, 70, 110, 160, 210]
    with ThreadPoolExecutor(len(values)) as pool:
        first = pool.submit(post_png, client, values[0])
        assert backend.entered.wait(10)
        rest = [pool.submit(post_png, client, v) for v in values[1:]]
        wait_until(lambda: batcher_of(client, "toy").queue_depth == 4, what="4 queued requests")
        backend.gate.set()
        responses = [first.result(10), *(f.result(10) for f in rest)]
    scores = [r.json()["detections"][0]["score"] for r in responses]
    assert scores == pytest.approx([v / 255 for v in values], abs=1e-3)
    assert [len(call) for call in backend.calls] == [1, 4]  # the four waited together
    assert sorted(backend.calls[1]) == pytest.approx(values[1:])


# ------------------------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("params", "headers", "media_type"),
    [
        ({"format": "jpeg"}, {}, "image/jpeg"),
        ({"format": "png"}, {}, "image/png"),
        ({}, {"accept": "image/png"}, "image/png"),
        ({}, {"accept": "text/html;q=0.9, image/jpeg"}, "image/jpeg"),
        ({"format": "json"}, {"accept": "image/png"}, "application/json"),
    ],
)
def test_boxed_image_responses(
    client: TestClient, params: dict[str, str], headers: dict[str, str], media_type: str
) -> None:
    original = solid_image(230, height=90, width=120)
    response = client.post(
        "/detect", params=params, content=encode(original), headers={"content-type": "image/png", **headers}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == media_type
    if media_type == "application/json":
        return
    drawn = cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_COLOR)
    assert drawn is not None
    assert drawn.shape == (90, 120, 3)
    assert response.headers["x-detections"] == "3"
    assert np.abs(drawn.astype(int) - 230).max() > 100  # boxes were drawn on it


def test_unproducible_accept_is_406(client: TestClient) -> None:
    response = client.post(
        "/detect",
        content=encode(solid_image(1)),
        headers={"content-type": "image/png", "accept": "text/html"},
    )
    assert response.status_code == 406
    assert response.json()["field"] == "accept"


def test_boxed_image_needs_exactly_one_image(client: TestClient) -> None:
    files = [("images", ("a.png", encode(solid_image(1)), "image/png"))] * 2
    response = client.post("/detect", params={"format": "jpeg"}, files=files)
    assert response.status_code == 400
    assert response.json()["field"] == "format"
    assert "got 2 images" in response.json()["error"]

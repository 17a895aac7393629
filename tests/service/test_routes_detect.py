"""POST /detect end to end over real (toy) ONNX models: answers, formats, batching, errors, overload.

The toy model scores an image by its mean pixel value (score of row 0 = mean / 255), so every check
of "its own answer" compares a response with the grey level its request sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient
from pycocotools import mask as mask_utils
from service_testkit import (
    TOY_BOXES,
    GatedFactory,
    add_toy_model,
    encode,
    solid_image,
    wait_until,
    with_exif_orientation,
)

from service.model_runtime import ModelRuntime

MakeClient = Callable[..., TestClient]


def post_png(client: TestClient, value: int = 255, path: str = "/detect", **params: str | int | float) -> Any:
    return client.post(
        path, params=params, content=encode(solid_image(value)), headers={"content-type": "image/png"}
    )


def batcher_of(client: TestClient, name: str) -> Any:
    app: Any = client.app
    runtime: ModelRuntime = app.state.runtime
    return runtime.get(name, None).batcher


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
    client = make_client(toy_repo, max_batch_size=8, max_queue_delay_ms=0)
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


# ------------------------------------------------------------------------------------------ bad input


def _truncated_jpeg() -> bytes:
    data = encode(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8), ".jpg")
    return data[: len(data) // 2]


BAD_REQUESTS = [
    # (description, params, content, content-type, files, status, field, message fragment)
    ("empty body", {}, b"", "image/png", None, 400, "body", "body is empty"),
    ("not an image", {}, b"hello world", "image/jpeg", None, 400, "body", "not a supported image"),
    ("truncated jpeg", {}, _truncated_jpeg(), "image/jpeg", None, 400, "body", "truncated JPEG"),
    ("wrong content type", {}, b"{}", "application/json", None, 415, "content-type", "application/json"),
    ("no content type", {}, b"abc", None, None, 415, "content-type", "no Content-Type"),
    ("unknown model", {"model": "nope"}, b"x", "image/png", None, 404, "model", "unknown model 'nope'"),
    ("unknown version", {"version": "7"}, b"x", "image/png", None, 404, "version", "no loaded version '7'"),
    (
        "threshold too high",
        {"score_threshold": "2"},
        b"x",
        "image/png",
        None,
        422,
        "score_threshold",
        "less than",
    ),
    (
        "threshold not a number",
        {"score_threshold": "hi"},
        b"x",
        "image/png",
        None,
        422,
        "score_threshold",
        "number",
    ),
    (
        "max_detections zero",
        {"max_detections": "0"},
        b"x",
        "image/png",
        None,
        422,
        "max_detections",
        "greater",
    ),
    ("unknown format", {"format": "gif"}, b"x", "image/png", None, 422, "format", "'json', 'jpeg' or 'png'"),
    ("unknown class", {"classes": "zebra"}, b"x", "image/png", None, 400, "classes", "unknown class 'zebra'"),
    (
        "misspelt parameter",
        {"score_treshold": "0.5"},
        b"x",
        "image/png",
        None,
        422,
        "score_treshold",
        "Extra",
    ),
    (
        "wrong field",
        {},
        None,
        None,
        {"picture": ("a.png", b"x", "image/png")},
        400,
        "picture",
        "field 'picture'",
    ),
    ("bad multipart", {}, b"--x\r\nnot multipart", "multipart/form-data", None, 400, "body", "boundary"),
]


@pytest.mark.parametrize(
    ("params", "content", "content_type", "files", "status", "field", "fragment"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_input_is_a_4xx_naming_what_was_wrong(
    client: TestClient,
    png_of: Callable[[int], bytes],
    params: dict[str, str],
    content: bytes | None,
    content_type: str | None,
    files: dict[str, tuple[str, bytes, str]] | None,
    status: int,
    field: str,
    fragment: str,
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    if files is not None:
        response = client.post("/detect", params=params, files=files)
    else:
        response = client.post("/detect", params=params, content=content, headers=headers)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["field"] == field
    assert fragment in body["error"]
    # The service is still up and serving.
    assert (
        client.post("/detect", content=png_of(200), headers={"content-type": "image/png"}).status_code == 200
    )


def test_bad_image_among_several_is_named_and_nothing_is_computed(
    client: TestClient, gated: GatedFactory
) -> None:
    files = [
        ("images", ("ok.png", encode(solid_image(9)), "image/png")),
        ("images", ("bad.png", b"garbage", "image/png")),
    ]
    response = client.post("/detect", files=files)
    assert response.status_code == 400
    assert response.json()["field"] == "images[1]"
    assert gated.backends["toy"].calls == []


def test_too_many_images(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, max_images_per_request=2)
    files = [("images", ("a.png", encode(solid_image(1)), "image/png"))] * 3
    response = client.post("/detect", files=files)
    assert response.status_code == 400
    assert "more than 2 images in one request; the limit is 2" in response.json()["error"]


def test_body_over_the_byte_limit_is_413(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, max_body_bytes=1000)
    big = encode(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    assert len(big) > 1000

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while streaming
        for start in range(0, len(big), 300):
            yield big[start : start + 300]

    for kwargs in ({"content": big}, {"content": chunks()}):
        response = client.post("/detect", headers={"content-type": "image/png"}, **kwargs)
        assert response.status_code == 413
        assert response.json()["field"] == "body"
        assert (
            "limit of 1000 bytes" in response.json()["error"]
            or "the limit is 1000" in response.json()["error"]
        )


def test_image_over_the_pixel_limit_is_413(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, max_image_pixels=4095)
    response = post_png(client)
    assert response.status_code == 413
    assert "64x64 PNG is 4096 pixels; the limit is 4095" in response.json()["error"]


# ------------------------------------------------------------------------------- overload and failure


def test_queue_overflow_is_429_with_retry_after(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    client = make_client(toy_repo, max_batch_size=1, max_queue_delay_ms=0, max_queue_size=1)
    backend = gated.backends["toy"]
    backend.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(post_png, client, 50)
        assert backend.entered.wait(10)
        queued = pool.submit(post_png, client, 100)
        wait_until(lambda: batcher_of(client, "toy").queue_depth == 1, what="one queued request")
        overflow = post_png(client, 150)
        backend.gate.set()
        assert running.result(10).status_code == 200
        assert queued.result(10).status_code == 200
    assert overflow.status_code == 429
    assert int(overflow.headers["retry-after"]) >= 1
    assert "max_queue_size 1" in overflow.json()["error"]
    assert all(pytest.approx(150) not in call for call in backend.calls)


def test_request_that_cannot_start_in_time_is_504_and_never_computed(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    client = make_client(toy_repo, max_queue_delay_ms=0, request_timeout_ms=1000)
    backend = gated.backends["toy"]
    backend.gate.clear()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(post_png, client, 50)
        assert backend.entered.wait(10)
        late = post_png(client, 200)  # waits behind the gated batch past its 1 s deadline
        assert late.status_code == 504
        assert "could not start inference before its deadline" in late.json()["error"]
        backend.gate.set()
        assert running.result(10).status_code == 200
    assert post_png(client, 90).status_code == 200
    seen = [round(v) for call in backend.calls for v in call]
    assert 200 not in seen and seen == [50, 90]


def test_backend_failure_is_500_for_that_batch_only(client: TestClient, gated: GatedFactory) -> None:
    gated.backends["toy"].fail_with = RuntimeError("CUDA fell over")
    failed = post_png(client)
    assert failed.status_code == 500
    assert "CUDA fell over" in failed.json()["error"]
    assert post_png(client).status_code == 200


# ------------------------------------------------------------------------- several models, geometry


def letterbox_expected(box: np.ndarray, height: int, width: int, net_h: int, net_w: int) -> list[float]:
    """The letterbox contract, computed independently: scale to fit, paste top-left, map back, clip."""
    scale = min(net_w / width, net_h / height)
    sx, sy = round(width * scale) / width, round(height * scale) / height
    x1, y1, x2, y2 = box * np.array([net_w, net_h, net_w, net_h]) / np.array([sx, sy, sx, sy])
    return [min(max(v, 0), lim) for v, lim in ((x1, width), (y1, height), (x2, width), (y2, height))]


@pytest.mark.parametrize(("height", "width"), [(200, 100), (100, 400)], ids=["tall", "wide"])
def test_letterbox_and_stretch_boxes_over_http(
    make_client: MakeClient, multi_repo: Path, height: int, width: int
) -> None:
    client = make_client(multi_repo)
    data = encode(solid_image(255, height=height, width=width))
    headers = {"content-type": "image/png"}
    boxed = client.post("/detect", params={"model": "letterbox"}, content=data, headers=headers).json()
    stretched = client.post("/detect", params={"model": "a-stretch"}, content=data, headers=headers).json()
    for i, detection in enumerate(boxed["detections"]):
        expected = letterbox_expected(TOY_BOXES[i], height, width, net_h=48, net_w=64)
        got = [detection["box"][k] for k in ("x1", "y1", "x2", "y2")]
        assert got == pytest.approx(expected, abs=0.02)
    for i, detection in enumerate(stretched["detections"]):
        expected = (TOY_BOXES[i] * np.array([width, height, width, height])).tolist()
        assert [detection["box"][k] for k in ("x1", "y1", "x2", "y2")] == pytest.approx(expected, abs=0.02)


def test_versions_default_to_the_latest(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo, versions="all")
    assert post_png(client, model="a-stretch").json()["version"] == "2"
    assert post_png(client, model="a-stretch", version="1").json()["version"] == "1"
    assert post_png(client).json()["model"] == "a-stretch"  # default: the first name


def test_mask_model_returns_rle_masks_inside_their_boxes(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo)
    body = post_png(client, 255, model="masks").json()
    for detection in body["detections"]:
        rle = detection["mask"]
        assert rle["size"] == [64, 64]
        mask = mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()})
        ys, xs = np.nonzero(mask)
        box = detection["box"]
        assert len(xs) > 0
        assert (
            box["x1"] <= xs.min()
            and xs.max() <= box["x2"]
            and box["y1"] <= ys.min()
            and ys.max() <= box["y2"]
        )
    drawn = post_png(client, 255, model="masks", format="png")
    assert drawn.status_code == 200 and drawn.headers["content-type"] == "image/png"


def test_mask_model_returns_polygons_that_decode_to_its_rle_masks(
    make_client: MakeClient, multi_repo: Path
) -> None:
    client = make_client(multi_repo)
    rles = post_png(client, 255, model="masks").json()["detections"]
    polygons = post_png(client, 255, model="masks", mask_format="polygon").json()["detections"]
    assert len(polygons) == len(rles) > 0
    for as_rle, as_polygons in zip(rles, polygons, strict=True):
        assert "mask" not in as_polygons and as_polygons["polygons"]
        encoded = mask_utils.merge(mask_utils.frPyObjects(as_polygons["polygons"], 64, 64))
        rle = as_rle["mask"]
        expected = mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()})
        np.testing.assert_array_equal(mask_utils.decode(encoded), expected)  # hole-free: exact
    bad = post_png(client, 255, model="masks", mask_format="bitmap")
    assert bad.status_code == 422 and bad.json()["field"] == "mask_format"


def test_fixed_batch_model_serves_short_batches(
    make_client: MakeClient, multi_repo: Path, gated: GatedFactory
) -> None:
    client = make_client(multi_repo)
    assert post_png(client, 128, model="fixed").json()["detections"][0]["score"] == pytest.approx(
        128 / 255, abs=1e-3
    )
    assert [len(call) for call in gated.backends["fixed"].calls] == [1]  # padded to 4 inside the backend


def test_server_timing_header_gives_each_stage(client: TestClient) -> None:
    for fmt, last in (("json", "encode"), ("png", "render")):
        response = client.post(
            "/detect",
            params={"format": fmt},
            content=encode(solid_image(255)),
            headers={"content-type": "image/png"},
        )
        assert response.status_code == 200
        entries = [e.strip().split(";dur=") for e in response.headers["server-timing"].split(",")]
        names = [name for name, _ in entries]
        assert names == ["decode", "preprocess", "queue_wait", "inference", "postprocess", last, "total"]
        durations = {name: float(ms) for name, ms in entries}
        assert all(ms >= 0 for ms in durations.values())
        assert durations["total"] >= durations["inference"] > 0


def test_several_models_and_no_declared_default_refuse_to_guess(
    make_client: MakeClient, tmp_path: Path
) -> None:
    for name in ("b-model", "a-model"):
        add_toy_model(tmp_path, name)
    client = make_client(tmp_path)
    listed = client.get("/v1/models").json()
    assert listed["default_model"] is None and not any(m["default"] for m in listed["models"])
    response = post_png(client)
    assert response.status_code == 400
    assert response.json()["field"] == "model"
    assert "declares no default; it has ['a-model', 'b-model']" in response.json()["error"]
    assert post_png(client, model="b-model").status_code == 200

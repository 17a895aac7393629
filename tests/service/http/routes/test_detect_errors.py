"""POST /detect refusing what it cannot serve: bad input (4xx naming what was wrong), limits (413),
overload (429, 504) and backend failure (500 for that batch only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from detect_testkit import MakeClient, batcher_of, post_png
from fastapi.testclient import TestClient
from service_testkit import (
    GatedFactory,
    encode,
    solid_image,
    wait_until,
)

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
    (
        "unknown format",
        {"format": "gif"},
        b"x",
        "image/png",
        None,
        422,
        "format",
        "'json', 'jpeg', 'png' or 'mp4'",
    ),
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

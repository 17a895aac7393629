"""The pipeline entry gives back every byte it holds, however a request ends: served, failed on a bad
image, refused after its body was read, past its deadline, or abandoned by its caller. Requests go
through /detect and the Open Inference Protocol (both call the entry) and, for a caller going away,
through the entry itself."""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from detect_testkit import batcher_of, post_png
from fastapi.testclient import TestClient
from pipeline_testkit import files, held, resources_of, truncated_jpeg
from service_testkit import GatedFactory, encode, solid_image, wait_until

from service.errors import ClientClosedRequest
from service.pipeline.entry import DetectionPipeline, DetectOptions
from service.pipeline.inputs import ImageUpload

MakeClient = Callable[..., TestClient]


def infer_bytes(client: TestClient, model: str, *images: bytes) -> Any:
    """An inference request with encoded images as binary BYTES."""
    packed = b"".join(struct.pack("<I", len(image)) + image for image in images)
    tensor = {"name": "image_bytes", "shape": [len(images), 1], "datatype": "BYTES"}
    tensor["parameters"] = {"binary_data_size": len(packed)}
    header = json.dumps({"inputs": [tensor]}).encode()
    return client.post(
        f"/v2/models/{model}/infer",
        content=header + packed,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )


def infer_tensor(client: TestClient, model: str, value: int) -> Any:
    pixels = solid_image(value)[None]
    request = {
        "inputs": [
            {
                "name": "images",
                "shape": list(pixels.shape),
                "datatype": "UINT8",
                "data": pixels.ravel().tolist(),
            }
        ]
    }
    return client.post(f"/v2/models/{model}/infer", content=json.dumps(request).encode())


SERVED: dict[str, Callable[[TestClient], Any]] = {
    "detect json, several images": lambda c: c.post("/detect", files=files(*[encode(solid_image(9))] * 3)),
    "detect boxed image": lambda c: post_png(c, 200, format="png"),
    "detect masks as RLE": lambda c: post_png(c, 200, model="masks"),
    "detect masks as polygons": lambda c: post_png(c, 200, model="masks", mask_format="polygon"),
    "v2 encoded images": lambda c: infer_bytes(c, "masks", encode(solid_image(9)), encode(solid_image(99))),
    "v2 tensors": lambda c: infer_tensor(c, "a-stretch", 200),
}


@pytest.mark.parametrize("send", SERVED.values(), ids=SERVED.keys())
def test_a_served_request_gives_back_every_byte(
    make_client: MakeClient, multi_repo: Path, send: Callable[[TestClient], Any]
) -> None:
    client = make_client(multi_repo)
    response = send(client)
    assert response.status_code == 200, response.text
    assert held(client) == (0, 0, 0)


def test_a_bad_image_among_good_ones_gives_back_every_byte(client: TestClient, gated: GatedFactory) -> None:
    good, bad = encode(solid_image(9)), truncated_jpeg()
    response = client.post("/detect", files=files(good, good, bad))
    assert response.status_code == 400 and response.json()["field"] == "images[2]"
    assert held(client) == (0, 0, 0)
    response = infer_bytes(client, "toy", good, bad)
    assert response.status_code == 400 and response.json()["field"] == "image_bytes[1]"
    assert held(client) == (0, 0, 0)
    assert gated.backends["toy"].calls == []


def test_a_queue_full_refusal_after_the_body_was_read_gives_back_every_byte(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    client = make_client(toy_repo, max_batch_size=1, max_queue_delay_ms=0, max_queue_size=2)
    backend = gated.backends["toy"]
    backend.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(post_png, client, 50)
        assert backend.entered.wait(10)
        queued = pool.submit(post_png, client, 100)
        wait_until(lambda: batcher_of(client, "toy").queue_depth == 1, what="one queued request")
        others = held(client)
        # One image would fit behind the queued one; two do not: refused once the body was read.
        refused = client.post("/detect", files=files(encode(solid_image(7)), encode(solid_image(8))))
        assert held(client) == others
        backend.gate.set()
        assert running.result(10).status_code == 200
        assert queued.result(10).status_code == 200
    assert refused.status_code == 429 and "max_queue_size 2" in refused.json()["error"]
    assert held(client) == (0, 0, 0)


@pytest.mark.parametrize("fmt", ["json", "png"])
def test_a_request_past_its_deadline_gives_back_every_byte(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory, fmt: str
) -> None:
    client = make_client(toy_repo, max_queue_delay_ms=0, request_timeout_ms=500)
    backend = gated.backends["toy"]
    backend.gate.clear()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(post_png, client, 50)
        assert backend.entered.wait(10)
        others = held(client)
        late = post_png(client, 200, format=fmt)  # its decoded original is held while it waits
        assert late.status_code == 504
        assert held(client) == others
        backend.gate.set()
        assert running.result(10).status_code == 200
    assert held(client) == (0, 0, 0)


def test_a_caller_that_goes_away_gives_back_every_byte(client: TestClient, gated: GatedFactory) -> None:
    app: Any = client.app
    pipeline: DetectionPipeline = app.state.pipeline
    model = app.state.runtime.get("toy", None)
    resources = resources_of(client)
    backend = gated.backends["toy"]
    backend.gate.clear()

    @asynccontextmanager
    async def body() -> AsyncIterator[list[ImageUpload]]:
        async with resources.body_budget.hold(1000, 1):
            yield [ImageUpload("body", encode(solid_image(9)))]

    async def scenario() -> tuple[int, int, int]:
        gone = asyncio.Event()

        async def request() -> None:
            async with pipeline.admit(model, time.monotonic(), gone=gone.wait) as run:
                await run.detect(await run.hold_input(body()), DetectOptions(format="png"))

        task = asyncio.ensure_future(request())
        await asyncio.to_thread(backend.entered.wait, 10)
        while_running = held(client)
        gone.set()
        with pytest.raises(ClientClosedRequest):
            await task
        return while_running

    body_bytes, image_bytes, in_flight = client.portal.call(scenario)  # type: ignore[union-attr]
    assert body_bytes == 1000 and image_bytes > 0 and in_flight == 1
    assert held(client) == (0, 0, 0)
    backend.gate.set()

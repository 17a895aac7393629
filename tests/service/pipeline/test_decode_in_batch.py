"""``decode_in_batch``: a request's one image is decoded on the inference thread as its batch starts; an image
that will not decode there fails its own request (400, its field) and no other request of the batch."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from detect_testkit import batcher_of, post_png
from fastapi.testclient import TestClient
from pipeline_testkit import files, held
from service_testkit import GatedFactory, add_toy_model, encode, solid_image, wait_until

from service.pipeline import detect
from service.runtime.repository import SERVING_FILE

MakeClient = Callable[..., TestClient]


def corrupt_png() -> bytes:
    """A PNG whose header reads fine (so it is planned and queued) and whose pixel data fails its CRC (so
    decoding fails, on the inference thread)."""
    data = bytearray(encode(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)))
    start = data.index(b"IDAT") + 20
    data[start : start + 40] = bytes(b ^ 0xFF for b in data[start : start + 40])
    return bytes(data)


@pytest.fixture
def decoded_on(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread each image was decoded on, in order."""
    threads: list[str] = []
    real = detect.decode_planned

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(detect, "decode_planned", recording)
    return threads


def test_a_lone_image_is_decoded_on_the_inference_thread(
    make_client: MakeClient, toy_repo: Path, decoded_on: list[str]
) -> None:
    client = make_client(toy_repo, decode_in_batch=True)
    assert post_png(client, 50).status_code == 200
    assert post_png(client, 80, format="png").status_code == 200  # a boxed image keeps its original
    assert held(client) == (0, 0, 0)
    assert [name.startswith("infer-toy") for name in decoded_on] == [True, True]
    # Several images are all decoded (and validated) before any is queued, in the worker threads.
    decoded_on.clear()
    response = client.post("/detect", files=files(encode(solid_image(9)), encode(solid_image(99))))
    assert response.status_code == 200 and len(response.json()["results"]) == 2
    assert [name.startswith("detect-worker") for name in decoded_on] == [True, True]


def test_off_every_image_is_decoded_in_the_worker_threads(
    make_client: MakeClient, toy_repo: Path, decoded_on: list[str]
) -> None:
    client = make_client(toy_repo, decode_in_batch=False)
    assert post_png(client, 50).status_code == 200
    assert [name.startswith("detect-worker") for name in decoded_on] == [True]


def test_a_models_serving_file_turns_it_on_for_that_model(
    make_client: MakeClient, tmp_path: Path, decoded_on: list[str]
) -> None:
    add_toy_model(tmp_path, "toy")
    add_toy_model(tmp_path, "other")
    (tmp_path / "toy" / SERVING_FILE).write_text('{"decode_in_batch": true}')
    client = make_client(tmp_path)
    assert post_png(client, 50, model="toy").status_code == 200
    assert post_png(client, 50, model="other").status_code == 200
    assert [name.split("-")[0] for name in decoded_on] == ["infer", "detect"]


def test_an_image_that_will_not_decode_fails_alone_in_its_batch(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    client = make_client(toy_repo, decode_in_batch=True, batch_policy="fixed")
    backend = gated.backends["toy"]
    backend.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        running = pool.submit(post_png, client, 50)
        assert backend.entered.wait(10)
        good = pool.submit(post_png, client, 100)
        bad = pool.submit(lambda: client.post("/detect", files=files(corrupt_png())))
        wait_until(lambda: batcher_of(client, "toy").queue_depth == 2, what="both queued")
        backend.gate.set()
        assert running.result(10).status_code == 200
        assert good.result(10).status_code == 200
        refused = bad.result(10)
    assert refused.status_code == 400 and refused.json()["field"] == "images[0]", refused.text
    # The two shared a batch: the one that decoded ran alone in it.
    assert len(backend.calls) == 2 and backend.calls[1] == [pytest.approx(100, abs=1)]
    assert held(client) == (0, 0, 0)

"""POST /detect with ``tiling``: tiles queued as images, merged back in original pixels; bad tiling
refused before any work."""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np
import pycocotools.mask as mask_utils
import pytest
from detect_testkit import MakeClient, batcher_of
from fastapi.testclient import TestClient
from service_testkit import GatedFactory, add_toy_model, encode, png_bomb, solid_image, wait_until

from service.runtime.repository import SERVING_FILE

# A 192x128 image on the toy model's 64x64 input: tiles of 64x64 without overlap make a 3x2 grid.
GRID = [[x, y, x + 64, y + 64] for y in (0, 64) for x in (0, 64, 128)]


def _post(client: TestClient, image: np.ndarray | bytes, **params: str | float) -> object:
    data = image if isinstance(image, bytes) else encode(image)
    return client.post("/detect", params=params, content=data, headers={"content-type": "image/png"})


def _images_run(gated: GatedFactory, model: str = "toy") -> int:
    """Network inputs the model ran since its client started (after the warm-up)."""
    return sum(len(call) for call in gated.backends[model].calls)


@pytest.fixture
def client(make_client: MakeClient, toy_repo: Path) -> TestClient:
    return make_client(toy_repo, max_tiles_per_request=16)


def test_tiles_run_as_images_and_merge_in_original_pixels(client: TestClient, gated: GatedFactory) -> None:
    image = solid_image(200, height=128, width=192)
    untiled = _post(client, image).json()  # type: ignore[attr-defined]
    assert "tiles" not in untiled and _images_run(gated) == 1
    body = _post(client, image, tiling="64x64", tile_overlap=0).json()  # type: ignore[attr-defined]
    assert [[t["x1"], t["y1"], t["x2"], t["y2"]] for t in body["tiles"]] == GRID
    assert _images_run(gated) == 1 + len(GRID) + 1  # the tiles and the whole image
    assert (body["width"], body["height"]) == (192, 128)
    boxes = np.array([[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in body["detections"]])
    assert (boxes[:, [0, 2]] <= 192).all() and (boxes[:, [1, 3]] <= 128).all()
    # The toy's first box covers the middle half of each view: the first tile's, in original pixels.
    assert (16.0, 16.0, 48.0, 48.0) in {tuple(b) for b in boxes.tolist()}
    assert len(body["detections"]) > len(untiled["detections"])


def test_auto_tiles_only_large_images(client: TestClient) -> None:
    small = _post(client, solid_image(200, height=100, width=120), tiling="auto").json()  # type: ignore[attr-defined]
    assert "tiles" not in small
    large = _post(client, solid_image(200, height=300, width=400), tiling="auto").json()  # type: ignore[attr-defined]
    assert 1 < len(large["tiles"]) <= 15  # 16 network inputs per request, the whole image among them


def test_auto_tiles_are_network_sized_within_the_tile_budget_not_the_image_limit(
    make_client: MakeClient, toy_repo: Path
) -> None:
    """A tile is a network input: tiling=auto keeps the model's input size (64x64 here) although the request
    may carry only 2 images; the tile budget, not max_images_per_request, bounds the tiles."""
    client = make_client(toy_repo, max_images_per_request=2)
    body = _post(client, solid_image(200, height=300, width=400), tiling="auto").json()  # type: ignore[attr-defined]
    sizes = {(t["x2"] - t["x1"], t["y2"] - t["y1"]) for t in body["tiles"]}
    assert sizes == {(64, 64)} and len(body["tiles"]) == 48
    small_budget = make_client(toy_repo, max_tiles_per_request=16)
    body = _post(small_budget, solid_image(200, height=300, width=400), tiling="auto").json()  # type: ignore[attr-defined]
    assert 1 < len(body["tiles"]) <= 15 and min(t["x2"] - t["x1"] for t in body["tiles"]) > 64


def test_auto_tiles_grow_to_fit_the_time_budget(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    """Once the model's batch times are known, auto plans no more tiles than it runs in
    tiling_max_seconds; with no room for two inputs the image is not tiled at all."""
    client = make_client(toy_repo, tiling_max_seconds=1e-6)
    _post(client, solid_image(200, height=64, width=64))  # a first batch: the batch times are known
    assert batcher_of(client, "toy").throughput() is not None
    response = _post(client, solid_image(200, height=300, width=400), tiling="auto")
    assert response.status_code == 200, response.text  # type: ignore[attr-defined]
    assert "tiles" not in response.json() and response.json()["detections"]  # type: ignore[attr-defined]
    assert "tiles" in _post(client, solid_image(200, height=300, width=400), tiling="64x64").json()  # type: ignore[attr-defined]


def test_a_single_image_overtakes_a_large_tiled_request(
    make_client: MakeClient, toy_repo: Path, gated: GatedFactory
) -> None:
    """Tiles are queued tiling_batch_size at a time, one window after the other, after interactive images:
    an image sent while a 17-input tiled request runs goes alone into the very next batch (all tiles queued
    at once, in arrival order, would have kept it behind all 16 others). The fixed batching policy runs each
    window whole (the adaptive one would run the toy model's tiles one by one: batching gains it nothing)."""
    client = make_client(
        toy_repo, model_overrides={"toy": {"max_batch_size": 4}}, tiling_batch_size=4, batch_policy="fixed"
    )
    backend = gated.backends["toy"]
    backend.gate = gate = threading.Event()
    answers: dict[str, object] = {}
    big = solid_image(200, height=256, width=256)  # 16 tiles of 64x64 + the whole image
    tiled = threading.Thread(
        target=lambda: answers.update(tiled=_post(client, big, tiling="64x64", tile_overlap=0))
    )
    tiled.start()
    wait_until(backend.entered.is_set, what="the first batch of tiles running")
    assert batcher_of(client, "toy").queue_depth == 0  # the next window waits for this one
    single = threading.Thread(
        target=lambda: answers.update(single=_post(client, solid_image(50, height=64, width=64)))
    )
    single.start()
    wait_until(lambda: batcher_of(client, "toy").queue_depth == 1, what="the single image queued")
    gate.set()
    tiled.join(30)
    single.join(30)
    assert answers["tiled"].status_code == answers["single"].status_code == 200  # type: ignore[attr-defined]
    order = [value for call in backend.calls for value in call]
    assert sorted(order) == [50.0] + [200.0] * 17
    # The first window (4 tiles) was running; the image runs next, alone; then the tiles, 4 at a time.
    batches = [call for call in backend.calls]
    assert batches[0] == [200.0] * 4 and batches[1] == [50.0], batches
    assert [len(b) for b in batches[2:]] == [4, 4, 4, 1], batches


def test_server_and_model_defaults(make_client: MakeClient, toy_repo: Path) -> None:
    image = solid_image(200, height=128, width=192)
    client = make_client(toy_repo, tiling="64x64", tiling_overlap=0.0)
    assert len(_post(client, image).json()["tiles"]) == 6  # type: ignore[attr-defined]
    assert "tiles" not in _post(client, image, tiling="off").json()  # type: ignore[attr-defined]
    by_model = make_client(toy_repo, model_overrides={"toy": {"tiling": "96x64"}}, tiling_overlap=0.0)
    assert len(_post(by_model, image).json()["tiles"]) == 4  # type: ignore[attr-defined]


def test_a_models_serving_file_sets_its_default_tiling(make_client: MakeClient, tmp_path: Path) -> None:
    add_toy_model(tmp_path, "toy")
    (tmp_path / "toy" / SERVING_FILE).write_text('{"tiling": "64x64"}')
    image = solid_image(200, height=128, width=192)
    client = make_client(tmp_path, tiling_overlap=0.0)
    assert len(_post(client, image).json()["tiles"]) == 6  # type: ignore[attr-defined]
    overridden = make_client(tmp_path, model_overrides={"toy": {"tiling": "off"}})
    assert "tiles" not in _post(overridden, image).json()  # type: ignore[attr-defined]


def test_boxed_image_with_the_tile_grid(client: TestClient) -> None:
    image = solid_image(40, height=128, width=192)
    response = _post(client, image, tiling="64x64", tile_overlap=0, format="png", tile_grid="true")
    assert response.status_code == 200  # type: ignore[attr-defined]
    drawn = cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_COLOR)  # type: ignore[attr-defined]
    assert (drawn[50, 63] > 200).all() and (drawn[127, 100] > 200).all()  # tile frames, white
    plain = _post(client, image, tiling="64x64", tile_overlap=0, format="png")
    drawn = cv2.imdecode(np.frombuffer(plain.content, np.uint8), cv2.IMREAD_COLOR)  # type: ignore[attr-defined]
    assert (drawn[127, 100] < 100).all()


def test_mask_model_pastes_tile_masks_in_original_pixels(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo, max_images_per_request=16)
    body = _post(
        client, solid_image(255, height=128, width=192), model="masks", tiling="64x64", tile_overlap=0
    ).json()  # type: ignore[attr-defined]
    assert len(body["tiles"]) == 6 and body["detections"]
    for d in body["detections"]:
        mask = mask_utils.decode(d["mask"])
        assert mask.shape == (128, 192) and mask.any()
        ys, xs = np.nonzero(mask)
        box = d["box"]
        assert xs.min() >= np.floor(box["x1"]) and xs.max() < np.ceil(box["x2"]) + 1
        assert ys.min() >= np.floor(box["y1"]) and ys.max() < np.ceil(box["y2"]) + 1


BAD_TILING = [
    # (params, image, status, field, message fragment)
    ({"tiling": "1x1"}, None, 400, "tiling", "tile sides must be 32..8192"),
    ({"tiling": "100000x100000"}, None, 400, "tiling", "tile sides must be 32..8192"),
    ({"tiling": "huge"}, None, 400, "tiling", "expected off, auto or a tile size"),
    ({"tiling": "64x64", "tile_overlap": 1.0}, None, 422, "tile_overlap", "less than or equal to 0.75"),
    ({"tiling": "32x32"}, None, 413, "tiling", "into 40 tiles (+1 whole image); at most 16"),
    ({"tiling": "auto"}, encode(solid_image(9, height=1, width=20_000)), 400, "tiling", "cannot be tiled"),
    ({"tiling": "auto"}, png_bomb(20_000, 20_000), 413, "body", "limit is 40000000"),
]


@pytest.mark.parametrize("params, image, status, field, fragment", BAD_TILING)
def test_bad_tiling_is_refused_before_any_work(
    client: TestClient,
    gated: GatedFactory,
    params: dict[str, str],
    image: bytes | None,
    status: int,
    field: str,
    fragment: str,
) -> None:
    response = _post(client, image if image is not None else solid_image(9, height=128, width=192), **params)
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["field"] == field and fragment in body["error"], body
    assert _images_run(gated) == 0

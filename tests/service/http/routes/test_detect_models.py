"""POST /detect across models: resize geometry (letterbox, stretch), versions, mask models, fixed
batches, Server-Timing, and the choice of model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from detect_testkit import MakeClient, post_png
from fastapi.testclient import TestClient
from pycocotools import mask as mask_utils
from service_testkit import (
    TOY_BOXES,
    GatedFactory,
    add_toy_model,
    encode,
    solid_image,
)

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

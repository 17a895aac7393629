"""The shipped real-photo model (MediaPipe's SSD MobileNetV2, Open Images v4, imported) on the real sample
photos: /detect, tiles of a large mosaic, a video file and a camera stream all find the person and the cat."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from PIL import Image
from service_testkit import encode, make_settings, start_client, stream_info, wait_until

from bench.streams.sources import SourceServer
from contract.manifest import Manifest
from service.app import create_app

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
SAMPLES = ROOT / "service" / "static" / "samples"
MODEL = "ssd-mobilenetv2-oidv4"
# Where the astronaut and the cat are (hand-measured, original pixels): x1, y1, x2, y2.
ASTRONAUT = (20, 15, 365, 512)
CAT = (0, 0, 440, 300)


def _photo(name: str) -> np.ndarray:
    return np.asarray(Image.open(SAMPLES / f"{name}.jpg").convert("RGB"))


def _iou(box: dict[str, float], truth: tuple[int, int, int, int]) -> float:
    x1, y1, x2, y2 = (box[k] for k in ("x1", "y1", "x2", "y2"))
    ix = max(0.0, min(x2, truth[2]) - max(x1, truth[0]))
    iy = max(0.0, min(y2, truth[3]) - max(y1, truth[1]))
    inter = ix * iy
    return inter / ((x2 - x1) * (y2 - y1) + (truth[2] - truth[0]) * (truth[3] - truth[1]) - inter)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real-photo-repo")
    (root / MODEL).symlink_to(MODELS / MODEL)
    return root


@pytest.fixture(scope="module")
def source() -> Iterator[SourceServer]:
    with SourceServer(fps=10, frames=[_photo("astronaut")] * 4) as server:
        yield server


@pytest.fixture(scope="module")
def client(repo: Path, source: SourceServer) -> Iterator[Any]:
    settings = make_settings(
        repo, max_images_per_request=64, stream_sources=source.base_url, stream_open_timeout_s=2.0
    )
    client = start_client(create_app(settings))
    try:
        yield client
    finally:
        client.__exit__(None, None, None)


def test_the_shipped_model_says_where_it_comes_from_and_passed_its_verification() -> None:
    manifest = Manifest.read(MODELS / MODEL / "1")
    assert manifest.provenance.export_settings["command"] == "detect-export import"
    assert manifest.provenance.export_settings["source"]["licence"] == "Apache-2.0"
    assert (MODELS / MODEL / "1" / "LICENSE").is_file() and (MODELS / MODEL / "1" / "ORIGIN.md").is_file()
    verification = manifest.verification
    assert verification["passed"] and verification["raw_max_abs_error"] < 1e-3
    assert verification["matched"] == verification["reference_detections"] > 0
    assert verification["max_box_error_px"] <= 0.5
    assert {"Person", "Cat", "Car", "Dog"} <= {label.name for label in manifest.labels}


@pytest.mark.parametrize(
    ("photo", "label", "truth"), [("astronaut", "Person", ASTRONAUT), ("chelsea", "Cat", CAT)]
)
def test_detect_finds_the_person_and_the_cat(
    client: Any, photo: str, label: str, truth: tuple[int, int, int, int]
) -> None:
    response = client.post(
        "/detect",
        params={"model": MODEL},
        files=[("images", (photo, (SAMPLES / f"{photo}.jpg").read_bytes(), "image/jpeg"))],
    )
    assert response.status_code == 200, response.text
    detections = response.json()["detections"]
    assert detections and detections[0]["label"] == label, detections
    assert _iou(detections[0]["box"], truth) > 0.8, detections[0]
    assert client.get("/v1/models/" + MODEL).json()["self_check"]["status"] == "passed"


def test_tiles_of_a_large_mosaic_find_each_photo_subject(client: Any) -> None:
    """2x2 photos at ~1,000 px each: the person and the cat are found in the tiles, in original pixels."""
    tiles = [
        Image.fromarray(_photo(n)).resize((1000, 900))
        for n in ("astronaut", "chelsea", "coffee", "grace_hopper")
    ]
    mosaic = Image.new("RGB", (2000, 1800))
    for i, tile in enumerate(tiles):
        mosaic.paste(tile, ((i % 2) * 1000, (i // 2) * 900))
    response = client.post(
        "/detect",
        params={"model": MODEL, "tiling": "auto"},
        content=encode(np.asarray(mosaic), ".jpg"),
        headers={"content-type": "image/jpeg"},
    )
    assert response.status_code == 200, response.text
    found = {
        (d["label"], int(d["box"]["x1"] // 1000), int(d["box"]["y1"] // 900))
        for d in response.json()["detections"]
    }
    assert ("Person", 0, 0) in found and ("Cat", 1, 0) in found, found


def _clip(frames: list[np.ndarray], fps: int = 10) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for image in frames:
            output.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        output.mux(stream.encode())
    return buffer.getvalue()


def test_a_video_of_the_cat_is_tracked_frame_by_frame(client: Any) -> None:
    cat = _photo("chelsea")[:, :448]
    frames = [np.roll(cat, 4 * i, axis=1) for i in range(8)]  # the cat moves right
    response = client.post(
        "/detect", params={"model": MODEL}, content=_clip(frames), headers={"content-type": "video/mp4"}
    )
    assert response.status_code == 200, response.text
    lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
    frames_out = [line for line in lines if "detections" in line]
    assert len(frames_out) == 8
    cats = [[d for d in f["detections"] if d["label"] == "Cat"] for f in frames_out]
    assert all(len(c) >= 1 for c in cats), cats
    # One track through the clip (confirmed from the second frame on).
    assert len({c[0]["track_id"] for c in cats[1:]}) == 1, cats


def test_a_camera_stream_of_the_astronaut_sends_person_events(client: Any, source: SourceServer) -> None:
    created = client.post(
        "/v1/streams", json={"url": source.url("mjpeg/astronaut"), "model": MODEL, "fps": 10}
    )
    assert created.status_code == 201, created.text
    stream_id = created.json()["id"]
    body: list[str] = []
    reading = threading.Thread(target=lambda: body.append(client.get(f"/v1/streams/{stream_id}/events").text))
    reading.start()
    wait_until(lambda: stream_info(client, stream_id)["subscribers"] == 1, what="the events client")
    wait_until(
        lambda: int(stream_info(client, stream_id)["frames_processed"]) >= 3, timeout=20, what="3 frames"
    )  # type: ignore[call-overload]
    assert client.delete(f"/v1/streams/{stream_id}").status_code == 204
    reading.join(10)
    events = [json.loads(line[6:]) for line in body[0].splitlines() if line.startswith('data: {"')]
    assert events and all(any(d["label"] == "Person" for d in e["detections"]) for e in events), events[-1:]

"""POST /detect with a video file over the toy model: NDJSON lines with track ids, the boxed MP4, the
query's fps / max_frames / track, and bad videos (clear errors, bounded limits).

The toy model answers the same three boxes for every frame, scored by the frame's mean grey level, so a
bright video gives three detections a frame that ByteTrack follows as three tracks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import av
import pytest
from detect_testkit import MakeClient
from fastapi.testclient import TestClient
from service_testkit import encode, solid_image
from video_testkit import make_video

BRIGHT = 240  # toy scores ~ 0.92, 0.83, 0.74: above ByteTrack's activation threshold


def _lines(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def test_a_raw_mp4_answers_a_line_per_frame_with_stable_track_ids(client: TestClient) -> None:
    data = make_video(frames=10, background=BRIGHT)
    lines = _lines(client.post("/detect", content=data, headers={"content-type": "video/mp4"}))
    frames, summary = lines[:-1], lines[-1]
    assert [f["frame"] for f in frames] == list(range(10))
    assert [f["pts"] for f in frames] == pytest.approx([i / 10 for i in range(10)], abs=1e-3)
    assert all((f["width"], f["height"]) == (64, 48) for f in frames)
    assert [len(f["detections"]) for f in frames] == [3] * 10
    assert all("track_id" not in d for d in frames[0]["detections"])  # confirmed on the 2nd frame
    ids = {d["label"]: d["track_id"] for d in frames[1]["detections"]}
    assert sorted(ids.values()) == [0, 1, 2]
    for frame in frames[2:]:
        assert {d["label"]: d["track_id"] for d in frame["detections"]} == ids
    assert frames[3]["detections"][0]["box"] == pytest.approx({"x1": 16, "y1": 12, "x2": 48, "y2": 36})
    assert summary["summary"] is True and summary["model"] == "toy"
    assert (summary["frames_read"], summary["frames_processed"], summary["frames_skipped"]) == (10, 10, 0)
    assert summary["tracks"] == 3 and summary["stopped_by"] is None
    assert summary["codec"] == "h264" and summary["fps"] == pytest.approx(10)


@pytest.mark.parametrize(
    "container, media_type", [("matroska", "video/x-matroska"), ("webm", "video/webm"), ("mov", "")]
)
def test_multipart_and_other_containers(client: TestClient, container: str, media_type: str) -> None:
    data = make_video(frames=4, container=container, background=BRIGHT)
    files = {"file": (f"clip.{container}", data, media_type or "application/octet-stream")}
    lines = _lines(client.post("/detect", files=files))
    assert len(lines) == 5 and lines[-1]["frames_processed"] == 4


def test_fps_max_frames_and_track_off(client: TestClient) -> None:
    data = make_video(frames=20, fps=10, background=BRIGHT)
    post = {"content": data, "headers": {"content-type": "video/mp4"}}
    lines = _lines(client.post("/detect?fps=5", **post))
    assert [f["frame"] for f in lines[:-1]] == list(range(0, 20, 2))
    assert (lines[-1]["frames_processed"], lines[-1]["frames_skipped"]) == (10, 10)
    lines = _lines(client.post("/detect?max_frames=3&track=false&classes=cat", **post))
    assert len(lines) == 4 and lines[-1]["stopped_by"] == "max_frames" and lines[-1]["tracks"] == 0
    assert all(len(f["detections"]) == 1 and "track_id" not in f["detections"][0] for f in lines[:-1])


def test_format_mp4_is_the_video_with_boxes_drawn(client: TestClient) -> None:
    data = make_video(frames=6, background=BRIGHT)
    response = client.post("/detect?format=mp4", content=data, headers={"content-type": "video/mp4"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "video/mp4"
    with av.open(io.BytesIO(response.content)) as boxed:
        frames = [f.to_ndarray(format="rgb24") for f in boxed.decode(video=0)]
    assert len(frames) == 6 and frames[0].shape == (48, 64, 3)
    # The toy's first box (16, 12)-(48, 36) is drawn in its class colour (BGR 56, 56, 255: red).
    edge = frames[2][12, 20:44].astype(int)
    assert (edge[:, 0] - edge[:, 2]).mean() > 100


def test_accept_video_mp4_and_format_mismatches(client: TestClient) -> None:
    data = make_video(frames=2, background=BRIGHT)
    headers = {"content-type": "video/mp4", "accept": "video/mp4"}
    assert client.post("/detect", content=data, headers=headers).headers["content-type"] == "video/mp4"
    response = client.post("/detect?format=jpeg", content=data, headers={"content-type": "video/mp4"})
    assert response.status_code == 400 and response.json()["field"] == "format"
    image = encode(solid_image(200))
    response = client.post("/detect?format=mp4", content=image, headers={"content-type": "image/png"})
    assert response.status_code == 400 and "for a video" in response.json()["error"]


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"\x00\x00\x00\x18ftypmp42" + bytes(300), 400, "not a readable video"),
        (b"\x1a\x45\xdf\xa3" + b"garbage" * 40, 400, "not a readable video"),
        (b"", 400, "not a readable video"),
    ],
)
def test_bad_videos_are_clear_errors(client: TestClient, body: bytes, status: int, message: str) -> None:
    response = client.post("/detect", content=body, headers={"content-type": "video/mp4"})
    assert response.status_code == status, response.text
    assert message in response.json()["error"] and response.json()["field"] == "video"


def test_a_truncated_video_is_an_error_or_its_whole_frames(client: TestClient) -> None:
    data = make_video(frames=30, container="matroska", background=BRIGHT)
    response = client.post("/detect", content=data[: len(data) // 2], headers={"content-type": "video/webm"})
    if response.status_code == 200:
        lines = _lines(response)
        assert "summary" in lines[-1] or "error" in lines[-1]
        assert len(lines) < 31
    else:
        assert response.status_code == 400 and response.json()["field"] == "video"


def test_a_video_without_frames_is_refused(client: TestClient) -> None:
    data = make_video(frames=0)
    response = client.post("/detect", content=data, headers={"content-type": "video/mp4"})
    assert response.status_code == 400, response.text
    assert "no frame" in response.json()["error"] or "not a readable" in response.json()["error"]


def test_limits_are_settings(make_client: MakeClient, toy_repo: Path) -> None:
    data = make_video(width=64, height=48, frames=12, background=BRIGHT)
    video = {"content": data, "headers": {"content-type": "video/mp4"}}
    client = make_client(toy_repo, video_max_pixels=1000, video_max_bytes=len(data) - 1)
    response = client.post("/detect", **video)
    assert response.status_code == 413 and "limit is" in response.json()["error"]
    client = make_client(toy_repo, video_max_pixels=1000)
    response = client.post("/detect", **video)
    assert response.status_code == 413 and "video_max_pixels" in response.json()["error"]
    client = make_client(toy_repo, video_max_read_frames=5, video_max_frames=100)
    assert _lines(client.post("/detect", **video))[-1]["stopped_by"] == "max_read_frames"
    client = make_client(toy_repo, video_max_frames=4)
    summary = _lines(client.post("/detect?max_frames=50", **video))[-1]
    assert summary["frames_processed"] == 4 and summary["stopped_by"] == "max_frames"
    client = make_client(toy_repo, video_max_duration_s=0.35)
    assert _lines(client.post("/detect", **video))[-1]["frames_read"] == 4
    client = make_client(toy_repo, image_memory_bytes=64 * 48 * 20)  # less than the decoder's working set
    response = client.post("/detect", **video)
    assert response.status_code == 413 and "image memory" in response.json()["error"]

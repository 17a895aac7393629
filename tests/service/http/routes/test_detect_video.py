"""POST /detect with a video file over the toy model: NDJSON lines with track ids, the boxed MP4, the
query's fps / max_frames / track, and bad videos (clear errors, bounded limits).

The toy model answers the same three boxes for every frame, scored by the frame's mean grey level, so a
bright video gives three detections a frame that ByteTrack follows as three tracks."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from detect_testkit import MakeClient
from fastapi.testclient import TestClient
from service_testkit import encode, solid_image, wait_until
from video_testkit import claim_duration, make_video, noisy_mjpeg_mkv

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


def test_detect_every_answers_every_frame_with_predicted_boxes_in_between(client: TestClient) -> None:
    data = make_video(frames=20, fps=10, background=BRIGHT)
    post = {"content": data, "headers": {"content-type": "video/mp4"}}
    lines = _lines(client.post("/detect?fps=5&detect_every=3", **post))
    frames, summary = lines[:-1], lines[-1]
    assert [f["frame"] for f in frames] == list(range(0, 20, 2))  # fps keeps its meaning
    assert [f["source"] for f in frames] == ["detected", "predicted", "predicted"] * 3 + ["detected"]
    assert [f["frames_since_detection"] for f in frames] == [0, 1, 2] * 3 + [0]
    assert (summary["frames_processed"], summary["frames_detected"]) == (10, 4)
    assert [len(f["detections"]) for f in frames[1:3]] == [0, 0]  # no confirmed track yet
    ids = {d["label"]: d["track_id"] for d in frames[3]["detections"]}
    assert sorted(ids.values()) == [0, 1, 2]
    for frame in frames[4:]:  # the toy's boxes stand still: predicted where they were detected
        assert {d["label"]: d["track_id"] for d in frame["detections"]} == ids
        box = next(
            d["box"] for d in frame["detections"] if d["track_id"] == frames[3]["detections"][0]["track_id"]
        )
        assert box == pytest.approx(frames[3]["detections"][0]["box"], abs=0.5)
    mp4 = client.post("/detect?detect_every=4&format=mp4", **post)
    assert mp4.status_code == 200 and mp4.headers["content-type"] == "video/mp4"
    with av.open(io.BytesIO(mp4.content)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 20


def test_detect_every_needs_track_and_a_sane_value(client: TestClient) -> None:
    post = {"content": make_video(frames=4, background=BRIGHT), "headers": {"content-type": "video/mp4"}}
    response = client.post("/detect?detect_every=2&track=false", **post)
    assert response.status_code == 400 and "detect_every" in response.text
    assert client.post("/detect?detect_every=0", **post).status_code in (400, 422)


def test_detect_budget_detects_that_many_frames_per_second_of_video_evenly_spaced(client: TestClient) -> None:
    data = make_video(frames=20, fps=10, background=BRIGHT)
    post = {"content": data, "headers": {"content-type": "video/mp4"}}
    lines = _lines(client.post("/detect?detect_budget=4", **post))  # 4 a second of a 10 fps video
    frames, summary = lines[:-1], lines[-1]
    assert [f["frame"] for f in frames] == list(range(20))  # every frame answered
    detected = [f["frame"] for f in frames if f["source"] == "detected"]
    assert detected == [0, 3, 5, 8, 10, 13, 15, 18]  # 2.5 frames apart on average, the first always
    assert summary["frames_detected"] == 8
    assert [f["frames_since_detection"] for f in frames[:6]] == [0, 1, 2, 0, 1, 0]
    ids = sorted(d["track_id"] for d in frames[5]["detections"])
    assert ids == [0, 1, 2] and sorted(d["track_id"] for d in frames[6]["detections"]) == ids  # predicted
    # With fps, the budget is per second of video still: 4 a second of 5 processed frames a second.
    lines = _lines(client.post("/detect?fps=5&detect_budget=4", **post))
    assert [f["source"] for f in lines[:-1]].count("detected") == 8 and lines[-1]["frames_processed"] == 10
    # A budget above the processed rate: every frame detected.
    lines = _lines(client.post("/detect?detect_budget=30", **post))
    assert lines[-1]["frames_detected"] == 20


def test_bad_detect_budgets_are_refused_naming_the_field(client: TestClient) -> None:
    post = {"content": make_video(frames=4, background=BRIGHT), "headers": {"content-type": "video/mp4"}}
    for query in (
        "detect_budget=0",
        "detect_budget=-1",
        "detect_budget=abc",
        "detect_budget=5000",
        "detect_budget=2&detect_every=3",
        "detect_budget=2&track=false",
    ):
        response = client.post(f"/detect?{query}", **post)
        assert response.status_code in (400, 422), (query, response.text)
        assert "detect_budget" in response.text, (query, response.text)


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


def test_a_multipart_video_can_ask_for_mp4(client: TestClient) -> None:
    files = {"file": ("clip.mp4", make_video(frames=3, background=BRIGHT), "video/mp4")}
    response = client.post("/detect?format=mp4", files=files)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "video/mp4" and response.content[4:8] == b"ftyp"
    response = client.post("/detect", files=files, headers={"accept": "video/mp4"})
    assert response.headers["content-type"] == "video/mp4"


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


def test_a_header_claiming_ten_hours_costs_what_the_frames_cost(client: TestClient) -> None:
    data = claim_duration(make_video(frames=6, container="matroska", background=BRIGHT), 10 * 3600)
    lines = _lines(client.post("/detect", content=data, headers={"content-type": "video/x-matroska"}))
    summary = lines[-1]
    assert summary["claimed_duration_s"] == pytest.approx(36000)
    assert summary["frames_read"] == summary["frames_processed"] == 6 and summary["stopped_by"] is None


def test_images_are_answered_while_a_video_streams(client: TestClient) -> None:
    video = make_video(frames=120, background=BRIGHT)
    image = encode(solid_image(200))
    done: list[float] = []
    with client.stream("POST", "/detect", content=video, headers={"content-type": "video/mp4"}) as streaming:
        lines = streaming.iter_lines()
        assert json.loads(next(lines))["frame"] == 0  # the video is being answered
        for _ in range(3):
            started = time.monotonic()
            response = client.post("/detect", content=image, headers={"content-type": "image/png"})
            assert response.status_code == 200, response.text
            done.append(time.monotonic() - started)
        rest = [json.loads(line) for line in lines if line]
    assert rest[-1]["frames_processed"] == 120
    assert max(done) < 5.0  # answered while the video still streamed, not after it


def test_a_mask_model_draws_its_masks_in_the_mp4(make_client: MakeClient, multi_repo: Path) -> None:
    client = make_client(multi_repo)
    data = make_video(frames=3, background=BRIGHT)
    headers = {"content-type": "video/mp4"}
    boxed = client.post("/detect?model=masks&format=mp4", content=data, headers=headers)
    plain = client.post("/detect?model=a-stretch&format=mp4", content=data, headers=headers)
    assert boxed.status_code == plain.status_code == 200, boxed.text
    with av.open(io.BytesIO(boxed.content)) as a, av.open(io.BytesIO(plain.content)) as b:
        masked = next(a.decode(video=0)).to_ndarray(format="rgb24").astype(int)
        unmasked = next(b.decode(video=0)).to_ndarray(format="rgb24").astype(int)
    # The toy masks fill the centre of each box: translucent colour there, none without masks.
    centre = (slice(20, 28), slice(28, 36))
    assert np.abs(masked[centre] - unmasked[centre]).mean() > 20


def test_damage_in_the_middle_ends_the_answer_with_an_error_line(client: TestClient) -> None:
    data = bytearray(noisy_mjpeg_mkv(frames=40))
    middle = len(data) // 2
    data[middle : middle + 200] = bytes(200)
    lines = _lines(client.post("/detect", content=bytes(data), headers={"content-type": "video/x-matroska"}))
    frames, last = lines[:-1], lines[-1]
    assert 4 <= len(frames) < 40 and [f["frame"] for f in frames] == list(range(len(frames)))
    assert last["status"] == 400 and last["field"] == "video"
    # Every frame decoded before the damage is answered.
    assert last["error"].startswith(f"video: corrupt data after frame {frames[-1]['frame']} ")


def test_everything_a_video_holds_is_given_back_however_it_ends(client: TestClient) -> None:
    resources: Any = client.app.state.resources  # type: ignore[attr-defined]
    lifecycle: Any = client.app.state.lifecycle  # type: ignore[attr-defined]
    data = make_video(frames=40, background=BRIGHT)
    video = {"content": data, "headers": {"content-type": "video/mp4"}}
    client.post("/detect", **video)
    client.post("/detect?format=mp4", **video)
    client.post("/detect", content=b"\x1a\x45\xdf\xa3junk", headers={"content-type": "video/webm"})
    damaged = bytearray(noisy_mjpeg_mkv())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 200] = bytes(200)
    client.post("/detect", content=bytes(damaged), headers={"content-type": "video/x-matroska"})
    with client.stream("POST", "/detect", **video) as response:  # the client stops reading early
        assert json.loads(next(response.iter_lines()))["frame"] == 0
    wait_until(
        lambda: (resources.body_budget.used, resources.image_budget.used, lifecycle.in_flight) == (0, 0, 0),
        what="the budgets and the in-flight count back to zero",
    )

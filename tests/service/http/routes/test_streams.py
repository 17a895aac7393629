"""/v1/streams against sources this test serves on 127.0.0.1: the lifecycle of a session (open, running,
events with track ids, snapshot, metrics, delete), what is refused and why, broken sources as a visible
state, the API key, and streams declared in the settings file."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import simplejpeg
from detect_testkit import batcher_of, post_png
from fastapi.testclient import TestClient
from listener_testkit import CountingListener, ScriptedServer
from service_testkit import GatedFactory, frames_processed, make_settings, stream_info, wait_until

from bench.streams.sources import SourceServer
from service.app import create_app

MakeClient = Callable[..., TestClient]
# White frames: the toy model's scores are then its full scale (0.8 to 1.0), so every detection is tracked.
WHITE = [np.full((48, 64, 3), 255, np.uint8)] * 4


@pytest.fixture(scope="module")
def source() -> Iterator[SourceServer]:
    with SourceServer(fps=15, frames=WHITE) as server:
        yield server


def settings_for(source: SourceServer, **overrides: object) -> dict[str, object]:
    values: dict[str, object] = {
        "stream_sources": source.base_url,
        "stream_open_timeout_s": 1.0,
        "stream_read_timeout_s": 1.0,
        "stream_reconnect_initial_s": 0.05,
        "stream_reconnect_attempts": 2,
    }
    values.update(overrides)
    return values


def test_streams_are_off_without_allowed_sources(client: TestClient) -> None:
    for response in (
        client.get("/v1/streams"),
        client.post("/v1/streams", json={"url": "http://127.0.0.1:1/a"}),
        client.get("/v1/streams/x/snapshot.jpg"),
    ):
        assert response.status_code == 403
        assert "DETECT_STREAM_SOURCES" in response.json()["error"]


def test_a_session_runs_sends_tracked_events_and_is_deleted(
    make_client: MakeClient, toy_repo: Path, source: SourceServer
) -> None:
    client = make_client(toy_repo, **settings_for(source))
    created = client.post("/v1/streams", json={"url": source.url("mjpeg/lifecycle"), "fps": 15})
    assert created.status_code == 201, created.text
    stream_id = created.json()["id"]
    wait_until(lambda: frames_processed(client, stream_id) >= 3, what="3 processed frames")
    state = stream_info(client, stream_id)
    assert state["state"] == "running" and state["model"] == "toy"
    assert (state["width"], state["height"]) == (64, 48)
    assert state["lag_ms_p99"] is not None and state["last_error"] is None
    assert [s["id"] for s in client.get("/v1/streams").json()["streams"]] == [stream_id]

    # Events: read in a thread until the session is deleted, which ends the response.
    body: list[str] = []
    reading = threading.Thread(target=lambda: body.append(client.get(f"/v1/streams/{stream_id}/events").text))
    reading.start()
    wait_until(lambda: stream_info(client, stream_id)["subscribers"] == 1, what="the events client")
    seen = frames_processed(client, stream_id)
    wait_until(lambda: frames_processed(client, stream_id) >= seen + 4, what="4 more frames")

    snapshot = client.get(f"/v1/streams/{stream_id}/snapshot.jpg")
    assert snapshot.status_code == 200 and snapshot.headers["content-type"] == "image/jpeg"
    image = cv2.imdecode(np.frombuffer(snapshot.content, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (48, 64, 3)
    assert not (image > 250).all()  # boxes and captions are drawn on the white frame

    metrics = client.get("/metrics").text
    assert f'detect_stream_processed_frames_total{{stream="{stream_id}"}}' in metrics
    assert 'detect_streams{state="running"} 1.0' in metrics

    assert client.delete(f"/v1/streams/{stream_id}").status_code == 204
    reading.join(10)
    assert not reading.is_alive()
    frames = [json.loads(line[6:]) for line in body[0].splitlines() if line.startswith('data: {"')]
    assert len(frames) >= 3 and body[0].rstrip().endswith("data: {}")  # the end event
    numbers = [f["frame"] for f in frames]
    assert numbers == sorted(numbers)
    last = frames[-1]
    assert last["stream"] == stream_id and (last["width"], last["height"]) == (64, 48)
    assert {d["label"] for d in last["detections"]} == {"cat", "dog", "bird"}
    # The toy model finds the same boxes in every frame: their track ids are stable from frame to frame.
    ids = [sorted(d["track_id"] for d in f["detections"]) for f in frames[-3:]]
    assert None not in ids[0] and ids[0] == ids[1] == ids[2]
    assert len(set(ids[0])) == len(last["detections"]) >= 3

    assert client.get(f"/v1/streams/{stream_id}").status_code == 404
    metrics = client.get("/metrics").text
    assert f'stream="{stream_id}"' not in metrics
    assert 'detect_streams{state="running"} 0.0' in metrics


def test_a_budgeted_session_answers_every_frame_detected_or_predicted(
    make_client: MakeClient, toy_repo: Path, source: SourceServer
) -> None:
    """3 detections a second for a 15 fps camera with live tracks: detected at least every 5th frame,
    every frame taken answered in order, the frames in between with the tracks' predicted boxes."""
    settings = settings_for(source, stream_detect_budget_fps=3.0, stream_detect_every_max_frames=5)
    client = make_client(toy_repo, **settings)
    stream_id = client.post("/v1/streams", json={"url": source.url("mjpeg/budget"), "fps": 15}).json()["id"]
    body: list[str] = []
    reading = threading.Thread(target=lambda: body.append(client.get(f"/v1/streams/{stream_id}/events").text))
    reading.start()
    wait_until(lambda: frames_processed(client, stream_id) >= 45, what="45 answered frames")
    state = stream_info(client, stream_id)
    metrics = client.get("/metrics").text
    assert client.delete(f"/v1/streams/{stream_id}").status_code == 204
    reading.join(10)
    events = [json.loads(line[6:]) for line in body[0].splitlines() if line.startswith('data: {"')]
    numbers = [e["frame"] for e in events]
    assert numbers == sorted(set(numbers))
    taken = int(state["frames_read"]) - int(state["frames_skipped"])  # type: ignore[call-overload]
    answered = int(state["frames_processed"])  # type: ignore[call-overload]
    assert taken - 3 - int(state["dropped_frames"]) <= answered <= taken  # type: ignore[call-overload]
    assert answered == int(state["frames_detected"]) + int(state["frames_predicted"])  # type: ignore[call-overload]
    assert int(state["frames_detected"]) < answered / 2  # type: ignore[call-overload]
    assert 1 <= int(state["frames_since_detection_max"]) <= 6  # type: ignore[call-overload]
    sources = [e["source"] for e in events]
    assert "detected" in sources and "predicted" in sources
    since = [e["frames_since_detection"] for e in events]
    assert all((s == 0) == (src == "detected") for s, src in zip(since, sources, strict=True))
    ids = sorted(d["track_id"] for d in events[-6]["detections"])
    assert None not in ids and len(ids) == 3
    for event in events[-6:]:  # the toy's boxes stand still: the same tracks, detected or predicted
        assert sorted(d["track_id"] for d in event["detections"]) == ids
        assert (event["width"], event["height"]) == (64, 48)
    assert f'detect_stream_predicted_frames_total{{stream="{stream_id}"}}' in metrics
    assert f'detect_stream_motion_score{{stream="{stream_id}"}} 0.0' in metrics  # a still camera


def test_a_camera_that_changes_resolution_mid_stream(
    make_client: MakeClient, toy_repo: Path, source: SourceServer
) -> None:
    """Frames alternate between 64x48 and 96x72 every 4 frames: the session keeps running, each size's
    boxes stay with their size (a size change ends the tracks and is detected, never predicted from the
    other size's boxes), and the ids after a change are new ones."""
    big = np.full((72, 96, 3), 255, np.uint8)
    jpegs = [
        bytes(simplejpeg.encode_jpeg(f, quality=85, colorspace="RGB")) for f in [WHITE[0]] * 4 + [big] * 4
    ]
    with SourceServer(fps=15, frames=WHITE) as resizing:
        resizing.jpegs = jpegs  # the MJPEG path serves these in turn
        client = make_client(toy_repo, **settings_for(resizing, stream_detect_budget_fps=2.0))
        stream_id = client.post("/v1/streams", json={"url": resizing.url("mjpeg/sizes")}).json()["id"]
        body: list[str] = []
        events_url = f"/v1/streams/{stream_id}/events"
        reading = threading.Thread(target=lambda: body.append(client.get(events_url).text))
        reading.start()
        wait_until(lambda: frames_processed(client, stream_id) >= 40, what="40 answered frames")
        state = stream_info(client, stream_id)
        assert client.delete(f"/v1/streams/{stream_id}").status_code == 204
        reading.join(10)
    assert state["state"] == "running" and state["last_error"] is None
    events = [json.loads(line[6:]) for line in body[0].splitlines() if line.startswith('data: {"')]
    assert {(e["width"], e["height"]) for e in events} == {(64, 48), (96, 72)}
    last_detected: dict[str, Any] | None = None
    epochs: dict[int, int] = {}  # track id -> the run of same-size frames it appeared in
    epoch = 0
    for previous, event in itertools.pairwise(events):
        size = (event["width"], event["height"])
        if size != (previous["width"], previous["height"]):
            epoch += 1
            assert event["source"] == "detected" or not event["detections"]
        for d in event["detections"]:
            if d["track_id"] is not None:
                assert epochs.setdefault(d["track_id"], epoch) == epoch  # a size's tracks end with it
        if event["source"] == "detected":
            last_detected = event
        elif event["detections"]:
            assert last_detected is not None
            assert (last_detected["width"], last_detected["height"]) == size
            shown = sorted(d["box"] for d in last_detected["detections"] if d["track_id"] is not None)
            assert np.allclose(sorted(d["box"] for d in event["detections"]), shown, atol=1.0)
    assert epoch >= 4


def test_a_flickering_camera_is_detected_every_k_frames_and_no_more(
    make_client: MakeClient, toy_repo: Path
) -> None:
    """Black and white frames in turn: motion everywhere, all the time. The session is active, so it is
    detected about every 5th frame (its bound, here also its budget of 3 a second), and the flicker buys
    it nothing more."""
    black = np.zeros((48, 64, 3), np.uint8)
    with SourceServer(fps=15, frames=[WHITE[0], black]) as flicker:
        client = make_client(toy_repo, **settings_for(flicker, stream_detect_budget_fps=3.0))
        stream_id = client.post("/v1/streams", json={"url": flicker.url("mjpeg/flicker")}).json()["id"]
        wait_until(lambda: frames_processed(client, stream_id) >= 60, what="60 answered frames")
        state = stream_info(client, stream_id)
        metrics = client.get("/metrics").text
    assert state["state"] == "running" and float(state["motion"]) > 0.5  # type: ignore[arg-type]
    answered, detected = int(state["frames_processed"]), int(state["frames_detected"])  # type: ignore[call-overload]
    assert 0.12 * answered <= detected <= 0.35 * answered  # every 5th frame (0.2), not every frame
    assert int(state["frames_since_detection_max"]) <= 8  # type: ignore[call-overload]
    assert f'detect_stream_motion_score{{stream="{stream_id}"}} 0.0' not in metrics


def test_a_session_processes_at_its_fps_and_counts_the_rest_as_skipped(
    make_client: MakeClient, toy_repo: Path, source: SourceServer
) -> None:
    client = make_client(toy_repo, **settings_for(source))
    stream_id = client.post("/v1/streams", json={"url": source.url("mjpeg/fps"), "fps": 5}).json()["id"]
    wait_until(lambda: stream_info(client, stream_id)["frames_read"] >= 40, what="40 frames read (15 fps)")
    state = stream_info(client, stream_id)
    assert 4.0 <= float(state["processed_fps"]) <= 6.0  # type: ignore[arg-type]
    assert 12.0 <= float(state["input_fps"]) <= 18.0  # type: ignore[arg-type]
    assert int(state["frames_skipped"]) >= int(state["frames_read"]) // 2  # type: ignore[call-overload]


def test_an_interactive_request_goes_before_queued_stream_frames(
    make_client: MakeClient, toy_repo: Path, source: SourceServer, gated: GatedFactory
) -> None:
    client = make_client(toy_repo, max_batch_size=2, **settings_for(source))
    backend, batcher = gated.backends["toy"], batcher_of(client, "toy")
    backend.gate.clear()  # inference holds: what comes next queues
    for i in range(3):
        assert client.post("/v1/streams", json={"url": source.url(f"mjpeg/prio-{i}")}).status_code == 201
    assert backend.entered.wait(10)  # a batch of stream frames runs (and holds)
    # Each session has one frame in the batcher: in the held batch, or queued behind it.
    wait_until(lambda: len(backend.calls[0]) + batcher.queue_depth == 3, what="every session's frame")
    queued = batcher.queue_depth
    answers: list[Any] = []
    asking = threading.Thread(target=lambda: answers.append(post_png(client, 7)))
    asking.start()
    wait_until(lambda: batcher.queue_depth == queued + 1, what="the interactive image queued")
    backend.gate.set()
    asking.join(10)
    assert answers and answers[0].status_code == 200
    # White stream frames score 255, the interactive grey image 7: the next batch holds the interactive
    # image although stream frames were queued before it (with two queued, the batch was full and one
    # frame gave its place back).
    assert all(round(v) == 255 for v in backend.calls[0])
    assert 7 in [round(v) for v in backend.calls[1]]


@pytest.mark.parametrize("wait_batches", [2.0, 0.0])
def test_frames_behind_a_detection_that_cannot_start_are_answered_within_the_bound(
    make_client: MakeClient, toy_repo: Path, source: SourceServer, gated: GatedFactory, wait_batches: float
) -> None:
    """Inference holds with one session's frame in the only batch: the other session's detection cannot
    start. With stream_detect_wait_batches its frame expires after a frame interval (the toy's batches
    take milliseconds) and its frames keep being answered by prediction; with 0, only after
    stream_max_lag_ms (1 s): nothing is answered in the first 0.6 s."""
    settings = settings_for(source, max_batch_size=1, stream_detect_wait_batches=wait_batches)
    client = make_client(toy_repo, **settings)
    backend = gated.backends["toy"]
    ids = [
        client.post("/v1/streams", json={"url": source.url(f"mjpeg/wait-{i}")}).json()["id"] for i in (0, 1)
    ]
    for stream_id in ids:  # batches ran: the model's batch time is measured
        wait_until(lambda s=stream_id: int(stream_info(client, s)["frames_detected"]) >= 4, what="detections")
    backend.entered.clear()
    backend.gate.clear()
    assert backend.entered.wait(10)  # one session's frame holds the only batch
    before = [frames_processed(client, s) for s in ids]
    time.sleep(0.6)
    answered = [frames_processed(client, s) - b for s, b in zip(ids, before, strict=True)]
    dropped = [int(stream_info(client, s)["dropped_frames"]) for s in ids]  # type: ignore[call-overload]
    backend.gate.set()
    if wait_batches:
        assert max(answered) >= 5 and max(dropped) >= 3  # 0.6 s at 15 fps: ~9 frames, ~1 in 2 detected
    else:
        assert max(answered) <= 1  # all behind the detection waiting its 1 s
    for stream_id in ids:
        assert client.delete(f"/v1/streams/{stream_id}").status_code == 204


def test_what_is_refused_and_why(make_client: MakeClient, toy_repo: Path, source: SourceServer) -> None:
    client = make_client(toy_repo, **settings_for(source, max_streams=1, stream_max_fps=20))
    cases = [
        ({"url": "file:///etc/passwd"}, 400, "url"),
        ({"url": "http://127.0.0.1:9/elsewhere"}, 403, "url"),
        ({"url": source.url("mjpeg/a"), "model": "nope"}, 404, None),
        ({"url": source.url("mjpeg/a"), "fps": 25}, 400, "fps"),
        ({"url": source.url("mjpeg/a"), "classes": "unicorn"}, 400, "classes"),
    ]
    for body, code, field in cases:
        response = client.post("/v1/streams", json=body)
        assert response.status_code == code, (body, response.text)
        if field is not None:
            assert response.json()["field"] == field
    assert client.post("/v1/streams", json={"url": source.url("mjpeg/a"), "colour": 1}).status_code == 422
    assert client.post("/v1/streams", json={"url": source.url("mjpeg/a")}).status_code == 201
    full = client.post("/v1/streams", json={"url": source.url("mjpeg/b")})
    assert full.status_code == 429 and "max_streams" in full.json()["error"]
    assert client.get("/v1/streams/nope").status_code == 404
    assert client.delete("/v1/streams/nope").status_code == 404


@pytest.mark.parametrize(("path", "reason"), [("garbage", "Invalid data"), ("silent", "timed out")])
def test_a_broken_source_is_a_visible_error_and_the_server_keeps_serving(
    make_client: MakeClient, toy_repo: Path, source: SourceServer, path: str, reason: str
) -> None:
    client = make_client(toy_repo, **settings_for(source))
    stream_id = client.post("/v1/streams", json={"url": source.url(path)}).json()["id"]
    wait_until(lambda: stream_info(client, stream_id)["state"] == "error", timeout=10, what="state error")
    state = stream_info(client, stream_id)
    assert reason in str(state["last_error"]) and state["reconnects"] == 1
    snapshot = client.get(f"/v1/streams/{stream_id}/snapshot.jpg")
    assert snapshot.status_code == 503 and "no processed frame" in snapshot.json()["error"]
    assert client.get("/health/ready").status_code == 200
    assert client.delete(f"/v1/streams/{stream_id}").status_code == 204


def test_a_camera_far_above_the_pixel_bound_ends_in_error(
    make_client: MakeClient, toy_repo: Path, source: SourceServer
) -> None:
    client = make_client(toy_repo, stream_max_pixels=600, **settings_for(source))  # 64x48 = 3072 > 4 x 600
    stream_id = client.post("/v1/streams", json={"url": source.url("mjpeg/large")}).json()["id"]
    wait_until(lambda: stream_info(client, stream_id)["state"] == "error", timeout=10, what="state error")
    assert "above 4 x stream_max_pixels" in str(stream_info(client, stream_id)["last_error"])
    assert client.delete(f"/v1/streams/{stream_id}").status_code == 204


def test_stream_endpoints_need_the_key(make_client: MakeClient, toy_repo: Path, source: SourceServer) -> None:
    client = make_client(toy_repo, api_keys="s3cret", **settings_for(source))
    assert client.get("/v1/streams").status_code == 401
    assert client.post("/v1/streams", json={"url": source.url("mjpeg/k")}).status_code == 401
    assert client.get("/v1/streams", headers={"X-API-Key": "s3cret"}).status_code == 200


def test_streams_of_the_settings_file_start_with_the_server(
    make_client: MakeClient, toy_repo: Path, source: SourceServer, tmp_path: Path
) -> None:
    declared = tmp_path / "streams.json"
    declared.write_text(json.dumps([{"id": "door", "url": source.url("mjpeg/door"), "fps": 5}]))
    client = make_client(toy_repo, streams_file=declared, **settings_for(source))
    wait_until(lambda: frames_processed(client, "door") >= 1, what="the declared stream's first frame")
    state = stream_info(client, "door")
    assert state["declared"] is True and state["fps"] == 5


def test_a_settings_file_outside_the_allowed_sources_stops_the_server_from_starting(
    toy_repo: Path, source: SourceServer, tmp_path: Path
) -> None:
    declared = tmp_path / "streams.json"
    declared.write_text(json.dumps([{"id": "x", "url": "http://127.0.0.1:9/elsewhere"}]))
    with pytest.raises(Exception, match="allowed source prefix"):
        create_app(make_settings(toy_repo, streams_file=declared, **settings_for(source)))


def test_a_redirect_out_of_the_allowed_sources_is_refused_without_connecting(
    make_client: MakeClient, toy_repo: Path
) -> None:
    with ScriptedServer() as camera, CountingListener() as outside:
        camera.redirect("/door", outside.url("door"))
        client = make_client(toy_repo, stream_sources=camera.base_url, stream_redirects="same-allowlist")
        url = camera.url("door").replace("http://", "http://admin:secret@")
        stream_id = client.post("/v1/streams", json={"url": url}).json()["id"]
        wait_until(lambda: stream_info(client, stream_id)["state"] == "error", timeout=10, what="error")
        state = stream_info(client, stream_id)
        assert outside.url("door") in state["last_error"] and "admin:***@" in state["last_error"]
        assert "secret" not in json.dumps(state) and state["reconnects"] == 0
        assert camera.requests == {"/door": 1} and outside.accepted == 0

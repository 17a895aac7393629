"""Capture in the served app: what it writes, and that it never fails or slows a request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detect_testkit import post_png
from fastapi.testclient import TestClient
from pycocotools.coco import COCO
from service_testkit import wait_until

from service.capture.recorder import SampleCapture
from service.capture.store import ANNOTATIONS, IMAGES, CaptureStore

MakeClient = Callable[..., TestClient]


def capture_of(client: TestClient) -> SampleCapture:
    app: Any = client.app
    capture: SampleCapture = app.state.capture
    return capture


def sample(client: TestClient, name: str, **labels: str) -> float:
    app: Any = client.app
    value = app.state.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


def test_uncertain_and_empty_images_are_captured_as_coco(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path
) -> None:
    # The toy model's top score is grey / 255: 115 -> 0.45 (in the band); 5 -> 0.02 (nothing kept);
    # 255 -> 1.0 (sure: not captured at a random share of 0).
    client = make_client(toy_repo, capture_dir=tmp_path, capture_score_band="0.3,0.6")
    for value in (115, 5, 255, 255):
        assert post_png(client, value).status_code == 200
    wait_until(lambda: sample(client, "detect_captured_total", reason="few_detections") == 1)
    wait_until(lambda: sample(client, "detect_captured_total", reason="score_band") == 1)
    wait_until(lambda: (tmp_path / ANNOTATIONS).exists() and len(COCO_of(tmp_path).getImgIds()) == 2)
    coco = COCO_of(tmp_path)
    reasons = {img["capture_reason"]: img for img in coco.loadImgs(coco.getImgIds())}
    band = reasons["score_band"]
    assert (band["width"], band["height"], band["model"], band["version"]) == (64, 64, "toy", "1")
    anns = coco.loadAnns(coco.getAnnIds(imgIds=[band["id"]]))
    assert max(a["score"] for a in anns) == round(115 / 255, 5) and all(a["prediction"] for a in anns)
    assert coco.loadAnns(coco.getAnnIds(imgIds=[reasons["few_detections"]["id"]])) == []
    # The image is the one sent, byte for byte (a PNG stays a PNG).
    assert (tmp_path / IMAGES / band["file_name"]).read_bytes()[:4] == b"\x89PNG"
    summary = client.get("/v1/captures").json()
    assert summary["state"] == "on" and summary["images"] == 2
    assert summary["by_reason"] == {"score_band": 1, "few_detections": 1}


def COCO_of(root: Path) -> COCO:
    return COCO(str(root / ANNOTATIONS))


def test_rate_limit_and_quota_bound_what_is_written(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path
) -> None:
    client = make_client(toy_repo, capture_dir=tmp_path, capture_random_share=1.0, capture_max_per_minute=3)
    for _ in range(6):
        assert post_png(client, 255).status_code == 200
    wait_until(lambda: sample(client, "detect_captured_total", reason="random") == 3)
    assert sample(client, "detect_capture_dropped_total", why="rate") == 3

    quota = make_client(
        toy_repo, capture_dir=tmp_path / "q", capture_random_share=1.0, capture_max_bytes=2000
    )
    for _ in range(8):
        assert post_png(quota, 255).status_code == 200
    store = capture_of(quota).store
    assert store is not None

    def settled() -> bool:  # every image written or dropped at the quota
        written = sample(quota, "detect_captured_total", reason="random")
        return written + sample(quota, "detect_capture_dropped_total", why="quota") == 8

    wait_until(settled, what="every image written or dropped")
    assert sample(quota, "detect_capture_dropped_total", why="quota") > 0
    assert 0 < store.used_bytes <= 2000
    on_disk = sum(
        p.stat().st_size for p in (tmp_path / "q").rglob("*") if p.is_file() and "annot" not in str(p)
    )
    assert on_disk == store.used_bytes


def test_a_full_queue_drops_with_a_counter_and_requests_stay_fast(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    gate, writing = threading.Event(), threading.Event()
    real_write = CaptureStore.write

    def slow_disk(self: CaptureStore, data: Any, record: Any) -> int:
        writing.set()
        gate.wait(30)  # a disk that does not answer
        return real_write(self, data, record)

    monkeypatch.setattr(CaptureStore, "write", slow_disk)
    client = make_client(toy_repo, capture_dir=tmp_path, capture_random_share=1.0, capture_queue=2)
    try:
        assert post_png(client, 255).status_code == 200
        assert writing.wait(10), "the writer never took the first image"
        times = []
        for _ in range(9):
            started = time.perf_counter()
            assert post_png(client, 255).status_code == 200
            times.append(time.perf_counter() - started)
        # One image is being written (stuck), two wait in the queue, the other seven are dropped.
        assert sample(client, "detect_capture_dropped_total", why="queue_full") == 7
        assert max(times) < 2.0, times  # the writer is stuck for 30 s; no request waited for it
    finally:
        gate.set()
    wait_until(lambda: sample(client, "detect_captured_total", reason="random") == 3)


def test_an_unwritable_folder_turns_capture_off_without_failing_requests(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path
) -> None:
    # /sys refuses new folders even to root (chmod would not stop root).
    client = make_client(toy_repo, capture_dir="/sys/fs/detect-capture", capture_random_share=1.0)
    assert post_png(client, 255).status_code == 200
    summary = client.get("/v1/captures").json()
    assert summary["state"] == "failed" and "cannot open" in summary["reason"]
    assert sample(client, "detect_capture_state", state="failed") == 1

    # A folder that stops being writable while serving: the writer turns capture off, requests go on.
    live = make_client(toy_repo, capture_dir=tmp_path, capture_random_share=1.0)
    (tmp_path / IMAGES).rmdir()
    (tmp_path / IMAGES).write_bytes(b"not a folder")  # every write below it now fails (ENOTDIR)
    for _ in range(3):
        assert post_png(live, 255).status_code == 200
    wait_until(lambda: capture_of(live).state == "failed", what="capture to turn off")
    assert "writing to" in (capture_of(live).reason or "")
    assert sample(live, "detect_capture_state", state="on") == 0
    assert post_png(live, 255).status_code == 200
    assert sample(live, "detect_capture_dropped_total", why="failed") >= 1


def test_nothing_is_written_when_capture_dir_is_unset(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    client = make_client(toy_repo, capture_random_share=1.0, capture_score_band="0,1")
    for value in (5, 115, 255):
        assert post_png(client, value).status_code == 200
    assert list(tmp_path.iterdir()) == []
    assert capture_of(client).store is None
    assert client.get("/v1/captures").json()["state"] == "off"
    assert client.get("/v1/captures/archive").status_code == 404
    assert sample(client, "detect_capture_state", state="off") == 1


def test_images_over_the_memory_budget_are_not_kept(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path
) -> None:
    client = make_client(toy_repo, capture_dir=tmp_path, capture_random_share=1.0, capture_memory_bytes=10)
    for _ in range(2):
        assert post_png(client, 255).status_code == 200
    assert sample(client, "detect_capture_dropped_total", why="memory") == 2
    summary = client.get("/v1/captures").json()
    assert summary["dropped"]["memory"] == 2 and summary["images"] == 0
    assert capture_of(client)._held == 0  # every reference given back

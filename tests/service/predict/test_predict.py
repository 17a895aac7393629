"""``detect-predict`` on a folder of images and on a video, with a local artifact and against a running
``detect-serve`` (a subprocess on 127.0.0.1), over the toy model (three boxes, scored by brightness)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import av
import cv2
import pytest
from service_testkit import Server, solid_image, wait_until
from video_testkit import make_video

from service.predict.cli import main

BRIGHT = 240


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    for value in (250, 200):
        cv2.imwrite(str(folder / f"grey{value}.png"), solid_image(value, height=60, width=80))
    (folder / "notes.txt").write_text("not an image")
    return folder


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    path = tmp_path / "clip.mp4"
    path.write_bytes(make_video(frames=8, background=BRIGHT))
    return path


def _results(out: Path) -> list[dict[str, object]]:
    results: list[dict[str, object]] = json.loads((out / "results.json").read_text())
    return results


def test_a_folder_of_images_with_a_local_artifact(toy_repo: Path, photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    main([str(photos), "--artifact", str(toy_repo / "toy" / "1"), "--backend", "cpu", "--out", str(out)])
    main([str(photos), "--artifact", str(toy_repo / "toy" / "1"), "--out", str(out), "--save", "--quiet"])
    results = _results(out)
    assert json.loads((out / "images.json").read_text()) == {"1": "grey200.png", "2": "grey250.png"}
    assert [r["image_id"] for r in results] == [1, 1, 1, 2, 2, 2]
    first = results[3]
    assert first["label"] == "cat" and first["bbox"] == pytest.approx([20, 15, 40, 30])  # stretch back
    assert first["score"] == pytest.approx(250 / 255, abs=0.01)
    assert sorted(p.name for p in (out / "boxed").iterdir()) == ["grey200.jpg", "grey250.jpg"]


def test_a_video_with_a_local_artifact_has_track_ids_and_a_boxed_video(
    toy_repo: Path, clip: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    main([str(clip), "--artifact", str(toy_repo / "toy" / "1"), "--out", str(out), "--save", "--quiet"])
    lines = [json.loads(line) for line in (out / "frames.ndjson").read_text().splitlines()]
    assert [line["frame"] for line in lines[:-1]] == list(range(8))
    assert lines[-1]["summary"] and lines[-1]["tracks"] == 3
    results = _results(out)
    assert {r["track_id"] for r in results if r["image_id"] == 8} == {0, 1, 2}
    assert not any("track_id" in r for r in results if r["image_id"] == 1)  # confirmed on frame 2
    with av.open(io.BytesIO((out / "boxed.mp4").read_bytes())) as boxed:
        assert sum(1 for _ in boxed.decode(video=0)) == 8


def test_against_a_running_server(toy_repo: Path, photos: Path, clip: Path, tmp_path: Path) -> None:
    server = Server(toy_repo, {"DETECT_WARMUP": "false"})
    try:
        wait_until(lambda: _ready(server.url), timeout=60, what="readiness")
        out = tmp_path / "remote"
        main([str(photos), "--url", server.url, "--out", str(out / "images"), "--quiet"])
        assert len(_results(out / "images")) == 6
        main([str(clip), "--url", server.url, "--out", str(out / "video"), "--fps", "5", "--save", "--quiet"])
        lines = (out / "video" / "frames.ndjson").read_text().splitlines()
        assert [json.loads(line)["frame"] for line in lines[:-1]] == [0, 2, 4, 6]
        assert json.loads(lines[-1])["frames_skipped"] == 4
        with av.open(io.BytesIO((out / "video" / "boxed.mp4").read_bytes())) as boxed:
            assert sum(1 for _ in boxed.decode(video=0)) == 4
        with pytest.raises(SystemExit, match="no model 'nope'"):
            main([str(clip), "--url", server.url, "--model", "nope", "--out", str(out / "x")])
    finally:
        server.close()


def _ready(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_bad_sources_are_clear_errors(tmp_path: Path, toy_repo: Path) -> None:
    artifact = ["--artifact", str(toy_repo / "toy" / "1")]
    with pytest.raises(SystemExit, match="does not exist"):
        main([str(tmp_path / "missing"), *artifact])
    with pytest.raises(SystemExit, match="a server watches streams; give its address with --url"):
        main(["rtsp://camera.local/stream", *artifact])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no images"):
        main([str(tmp_path / "empty"), *artifact, "--out", str(tmp_path / "o")])
    (tmp_path / "file.txt").write_text("hello")
    with pytest.raises(SystemExit, match="neither a folder of images nor a video"):
        main([str(tmp_path / "file.txt"), *artifact, "--out", str(tmp_path / "o")])

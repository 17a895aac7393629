"""``detect-predict STREAM_URL --url SERVER`` against a running ``detect-serve`` (a subprocess on 127.0.0.1)
that may open a loopback MJPEG camera of the test's own, over the toy model (three boxes, scored by
brightness): the events written, the session always closed, and the refusals."""

from __future__ import annotations

import io
import json
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from service_testkit import Server, wait_until

import service.predict.detectors as detectors
import service.predict.stream as stream_module
from bench.streams.sources import SourceServer
from service.predict.cli import main

WHITE = [np.full((48, 64, 3), 250, np.uint8)] * 4


@pytest.fixture(scope="module")
def camera() -> Iterator[SourceServer]:
    with SourceServer(fps=15, frames=WHITE) as server:
        yield server


@pytest.fixture(scope="module")
def server(toy_repo: Path, camera: SourceServer) -> Iterator[Server]:
    env = {
        "DETECT_WARMUP": "false",
        # The MJPEG cameras and the garbage path of the test's source; not its /clip.mp4.
        "DETECT_STREAM_SOURCES": f"{camera.url('mjpeg/')},{camera.url('garbage')}",
        "DETECT_STREAM_OPEN_TIMEOUT_S": "2",
        "DETECT_STREAM_READ_TIMEOUT_S": "2",
        "DETECT_STREAM_RECONNECT_INITIAL_S": "0.05",
        "DETECT_STREAM_RECONNECT_ATTEMPTS": "1",
    }
    process = Server(toy_repo, env)
    try:
        wait_until(lambda: _get(process.url, "/health/ready") is not None, timeout=60, what="readiness")
        yield process
    finally:
        process.close()


def _get(url: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(url + path, timeout=5) as response:
            return json.load(response)
    except OSError:
        return None


def _sessions(server: Server) -> list[dict[str, Any]]:
    streams: list[dict[str, Any]] = _get(server.url, "/v1/streams")["streams"]
    return streams


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "frames.ndjson").read_text().splitlines()]


def test_a_stream_through_a_server_until_max_frames(
    server: Server, camera: SourceServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    source = camera.url("mjpeg/door")
    main([source, "--url", server.url, "--out", str(out), "--max-frames", "4", "--fps", "10"])
    main([source, "--url", server.url, "--out", str(out), "--max-frames", "4", "--classes", "cat", "--quiet"])
    *events, summary = _lines(out)
    assert len(events) == 4 and all(e["width"] == 64 and e["height"] == 48 for e in events)
    assert summary["summary"] and summary["events"] == 4 and summary["stopped_by"] == "max_frames"
    assert summary["frames_processed"] >= 4
    results = json.loads((out / "results.json").read_text())
    assert {r["label"] for r in results} == {"cat"}  # --classes went to the session
    assert sorted({r["image_id"] for r in results}) == [e["frame"] for e in events]
    last = [r for r in results if r["image_id"] == events[-1]["frame"]]
    assert len(last) == 1 and "track_id" in last[0]  # confirmed after its first frame
    assert last[0]["score"] == pytest.approx(250 / 255, abs=0.01)
    frames = json.loads((out / "images.json").read_text())
    assert list(frames) == [str(e["frame"]) for e in events]
    assert _sessions(server) == []  # closed when done


def test_a_stream_until_the_duration(server: Server, camera: SourceServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    main([camera.url("mjpeg/yard"), "--url", server.url, "--out", str(out), "--duration", "1.5", "--quiet"])
    assert 1.5 <= time.monotonic() - started < 10
    *events, summary = _lines(out)
    assert summary["stopped_by"] == "duration" and summary["events"] == len(events)
    assert _sessions(server) == []


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_closes_the_session_and_keeps_what_was_written(
    how: str, server: Server, camera: SourceServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = detectors.coco_rows

    def interrupt_on_the_third(found: Any, image_id: int) -> Any:
        calls.append(image_id)
        if len(calls) == 3:
            if how == "ctrl-c":
                raise KeyboardInterrupt
            # What a SIGTERM runs in the main thread: the handler the CLI installed (a real signal to the
            # test process would reach every native library loaded by the tests before this one).
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            handler(signal.SIGTERM, None)
        return real(found, image_id)

    monkeypatch.setattr(stream_module, "coco_rows", interrupt_on_the_third)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="interrupted after 2 frames"):
        main([camera.url("mjpeg/porch"), "--url", server.url, "--out", str(out), "--quiet"])
    *events, summary = _lines(out)
    assert len(events) == 2 and summary["stopped_by"] == "interrupted"
    assert _sessions(server) == []
    assert signal.getsignal(signal.SIGTERM) is not stream_module._interrupt  # put back


def test_a_session_deleted_by_another_client_ends_the_run(
    server: Server, camera: SourceServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = detectors.coco_rows

    def delete_on_the_second(found: Any, image_id: int) -> Any:
        if found.frame is not None and not hasattr(delete_on_the_second, "done"):
            delete_on_the_second.done = True  # type: ignore[attr-defined]
            [session] = _sessions(server)
            request = urllib.request.Request(f"{server.url}/v1/streams/{session['id']}", method="DELETE")
            urllib.request.urlopen(request, timeout=5).close()
        return real(found, image_id)

    monkeypatch.setattr(stream_module, "coco_rows", delete_on_the_second)
    out = tmp_path / "out"
    main([camera.url("mjpeg/gate"), "--url", server.url, "--out", str(out), "--duration", "20", "--quiet"])
    *events, summary = _lines(out)
    assert summary["stopped_by"] == "stopped" and len(events) >= 1
    assert _sessions(server) == []


def test_a_broken_source_fails_with_its_reason_and_is_closed(
    server: Server, camera: SourceServer, tmp_path: Path
) -> None:
    out = ["--out", str(tmp_path / "o"), "--quiet"]
    with pytest.raises(SystemExit, match=r"stream \S+ failed: .*Invalid data"):
        main([camera.url("garbage"), "--url", server.url, "--duration", "20", *out])
    assert _sessions(server) == []
    [summary] = _lines(tmp_path / "o")  # what came is written, then the summary
    assert summary["stopped_by"] == "error" and summary["events"] == summary["frames_processed"] == 0
    assert json.loads((tmp_path / "o" / "results.json").read_text()) == []


def test_refusals(
    server: Server, camera: SourceServer, toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["--out", str(tmp_path / "o"), "--quiet"]
    with pytest.raises(SystemExit, match=r"403 url .* allowed source prefix \(DETECT_STREAM_SOURCES\)"):
        main([camera.url("clip.mp4"), "--url", server.url, *out])
    with pytest.raises(SystemExit, match="a server watches streams; give its address with --url"):
        main([camera.url("mjpeg/door"), "--artifact", str(toy_repo / "toy" / "1"), *out])
    with pytest.raises(SystemExit, match="--save is for folders and videos"):
        main([camera.url("mjpeg/door"), "--url", server.url, "--save", *out])
    with pytest.raises(SystemExit, match="--duration is for stream URLs"):
        main([str(tmp_path), "--url", server.url, "--duration", "3", *out])
    with pytest.raises(SystemExit):
        main([camera.url("mjpeg/door"), "--url", server.url, "--duration", "0", *out])
    assert "argument --duration: must be above 0, not 0" in capsys.readouterr().err
    assert _sessions(server) == []


def test_the_event_stream_parser_follows_the_sse_format() -> None:
    body = io.BytesIO(
        b': connected\n\nid: 1\nevent: frame\ndata: {"a":\ndata: 1}\n\n: keepalive\n\n'
        b"data:no space\r\n\r\nevent: end\ndata: {}\n\n"
    )
    assert list(stream_module._sse(body)) == [("frame", '{"a":\n1}'), ("message", "no space"), ("end", "{}")]

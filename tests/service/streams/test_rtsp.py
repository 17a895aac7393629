"""Stream sessions against a live RTSP camera on 127.0.0.1: GStreamer's RTSP server (``rtsp_server.py``,
run by the system Python) serving RTP/JPEG and RTP/H.264, pulled by the reader over RTSP/TCP. Frames
arrive at the camera's size, a session runs them through the pipeline, and a camera that dies, freezes or
comes back is a visible state with its reason, never a stuck thread.

Skipped, with the reason, where the GStreamer RTSP server is not installed
(scripts/dev/install-system-deps.sh).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_testkit import frames_processed, stream_info, wait_until

from service.streams.frame import Frame
from service.streams.guard import SourceGuard
from service.streams.reader import FrameReader, NewestFrame, ReaderConfig
from service.streams.sources import PROTOCOL_WHITELIST
from service.streams.state import SessionState

SYSTEM_PYTHON = "/usr/bin/python3"
SERVER = Path(__file__).with_name("rtsp_server.py")
WIDTH, HEIGHT = 160, 120
# Opening the live camera takes about 1.1 s (the reader's 1 s probe, stream_rtsp_probe_s); the open
# timeout leaves room for a busy machine.
OPEN_TIMEOUT_S = 8.0
PROBE = (
    "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0'); "
    "from gi.repository import Gst, GstRtspServer; Gst.init(None); "
    "print(' '.join(e for e in ('videotestsrc', 'videoconvert', 'jpegenc', 'rtpjpegpay') "
    "if Gst.ElementFactory.find(e) is None))"
)


@functools.cache
def missing_server() -> str | None:
    """Why the RTSP server cannot run here (None: it can)."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"{SYSTEM_PYTHON} not found"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", PROBE], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"GStreamer's RTSP server is not installed for {SYSTEM_PYTHON} ({last})"
    if probe.stdout.strip():
        return f"GStreamer elements missing: {probe.stdout.strip()}"
    return None


class RtspCamera:
    """``rtsp_server.py`` in a subprocess (a context manager): `url` of a mount; `kill`, `freeze`."""

    def __init__(
        self, log: Path, *, port: int = 0, pattern: str = "ball", fps: int = 15, login: str | None = None
    ) -> None:
        self.log = log  # the server's stderr (GStreamer warnings) goes to a file, never a pipe left full
        command = [SYSTEM_PYTHON, str(SERVER), "--port", str(port), "--pattern", pattern, "--fps", str(fps)]
        command += ["--width", str(WIDTH), "--height", str(HEIGHT)]
        if login is not None:  # "user:password"
            user, password = login.split(":", 1)
            command += ["--user", user, "--password", password]
        stderr = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
            )
        finally:
            os.close(stderr)  # the server has its own copy
        try:
            self.port, self.mounts = self._ready(timeout=30)
        except BaseException:
            self.close()
            raise

    def _ready(self, timeout: float) -> tuple[int, list[str]]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline().decode() if ready else ""
        if not line.startswith("READY "):
            log = self.log.read_text(errors="replace")[-2000:]
            raise AssertionError(f"the RTSP server did not start: {line!r}\n{log}")
        _, port, *mounts = line.split()
        return int(port), mounts

    def url(self, mount: str, login: str | None = None) -> str:
        return f"rtsp://{login + '@' if login else ''}127.0.0.1:{self.port}/{mount}"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def freeze(self) -> None:
        """Stop the process: its connections stay open and nothing comes (a hung camera)."""
        self.process.send_signal(signal.SIGSTOP)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            assert self.process.stdin is not None
            self.process.stdin.close()  # the server exits when its stdin closes
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> RtspCamera:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@pytest.fixture
def start_camera(tmp_path: Path) -> Iterator[Callable[..., RtspCamera]]:
    """``start_camera(port=, pattern=, fps=, login="user:password")``: a camera of the test's own, closed
    at its end."""
    reason = missing_server()
    if reason is not None:
        pytest.skip(f"{reason}; scripts/dev/install-system-deps.sh installs it")
    cameras: list[RtspCamera] = []

    def start(*, port: int = 0, pattern: str = "ball", fps: int = 15, login: str | None = None) -> RtspCamera:
        log = tmp_path / f"rtsp-server-{len(cameras)}.log"
        cameras.append(RtspCamera(log, port=port, pattern=pattern, fps=fps, login=login))
        return cameras[-1]

    yield start
    for camera in cameras:
        camera.close()


def url_of(camera: RtspCamera, mount: str) -> str:
    """The mount's URL; skips the test where the camera does not serve it (H.264 without x264enc)."""
    if f"/{mount}" not in camera.mounts:
        pytest.skip(f"no /{mount} mount: x264enc is not installed (gstreamer1.0-plugins-ugly)")
    return camera.url(mount)


def udp_sockets() -> int:
    """UDP sockets this process holds (Linux: its socket fds found in /proc/net/udp and udp6)."""
    udp: set[str] = set()
    for table in (Path("/proc/net/udp"), Path("/proc/net/udp6")):
        if table.exists():
            udp |= {line.split()[9] for line in table.read_text().splitlines()[1:]}
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                ours.add(link[len("socket:[") : -1])
    return len(udp & ours)


def reader_for(
    url: str,
    *,
    attempts: int = 2,
    backoff_s: float = 0.05,
    open_timeout_s: float = OPEN_TIMEOUT_S,
    guard: SourceGuard | None = None,
) -> FrameReader:
    config = ReaderConfig(
        url, 15, 1 << 24, open_timeout_s, 1.0, backoff_s, 0.2, attempts, PROTOCOL_WHITELIST, 1.0, guard
    )
    reader = FrameReader(config, NewestFrame(lambda: None), SessionState())
    reader.start()
    return reader


def take(reader: FrameReader, timeout: float = OPEN_TIMEOUT_S + 2) -> Frame:
    deadline = time.monotonic() + timeout
    while (frame := reader.slot.take()) is None:
        assert time.monotonic() < deadline, f"no frame; state {reader.state.value}: {reader.state.last_error}"
        time.sleep(0.01)
    return frame


@pytest.mark.parametrize(("mount", "codec"), [("jpeg", "mjpeg"), ("h264", "h264")])
def test_a_live_rtsp_camera_gives_moving_frames_of_its_size(
    start_camera: Callable[..., RtspCamera], mount: str, codec: str
) -> None:
    camera = start_camera()
    udp_before = udp_sockets()
    reader = reader_for(url_of(camera, mount))
    try:
        first = take(reader)
        assert reader.state.value == "running" and reader.state.last_error is None
        assert udp_sockets() == udp_before  # RTP comes interleaved on the RTSP connection (TCP): no UDP ports
        assert first.codec == codec
        # RTP/JPEG frames stand alone: kept as bytes, decoded by the taker; H.264 is decoded by the reader.
        assert isinstance(first.source, bytes) == (codec == "mjpeg")
        image = first.to_rgb(1 << 24)
        assert image.shape == (HEIGHT, WIDTH, 3)
        time.sleep(0.5)  # live: ~7 frames more, the slot keeps the newest
        later = take(reader, timeout=3)
        assert later.number >= first.number + 3
        assert not np.array_equal(later.to_rgb(1 << 24), image)  # the ball moved
    finally:
        assert reader.stop(2.0)


@pytest.mark.parametrize("mount", ["jpeg", "h264"])
def test_a_slow_camera_opens_after_a_short_probe(start_camera: Callable[..., RtspCamera], mount: str) -> None:
    # FFmpeg's default probe of a live source reads until it has ~20 frames or 5 s of them (5.5 s to the
    # first frame at 2 fps, measured). The reader's probe of 1 s (stream_rtsp_probe_s) gives it sooner.
    camera = start_camera(fps=2)
    started = time.monotonic()
    reader = reader_for(url_of(camera, mount), attempts=1, open_timeout_s=7.0)
    try:
        assert take(reader, timeout=5).to_rgb(1 << 24).shape == (HEIGHT, WIDTH, 3)
        assert time.monotonic() - started < 4.5  # FFmpeg's default: 5.5 s or more, whatever the load
    finally:
        assert reader.stop(2.0)


@pytest.mark.parametrize("mount", ["jpeg", "h264"])  # frames kept as packets / decoded by the reader
def test_a_killed_camera_is_reconnecting_then_an_error_and_the_reader_thread_ends(
    start_camera: Callable[..., RtspCamera], mount: str
) -> None:
    camera = start_camera()
    reader = reader_for(url_of(camera, mount), backoff_s=0.5)
    take(reader)
    camera.kill()
    killed = time.monotonic()
    wait_until(lambda: reader.state.value == "reconnecting", timeout=3, what="state reconnecting")
    assert reader.state.last_error  # why it reconnects (the connection ended)
    wait_until(lambda: reader.state.value == "error", timeout=5, what="state error")
    assert time.monotonic() - killed < 4  # noticed at once, one 0.5 s backoff, a refused reconnect
    reason = reader.state.last_error or ""
    assert "Connection refused" in reason and "2 attempts in a row" in reason, reason
    assert reader.reconnects == 1
    assert reader.stop(0.5)  # the thread has already ended


def test_a_camera_that_comes_back_on_its_address_is_read_again(
    start_camera: Callable[..., RtspCamera],
) -> None:
    camera = start_camera()
    reader = reader_for(camera.url("jpeg"), attempts=0)  # never gives up
    try:
        take(reader)
        camera.kill()
        wait_until(lambda: reader.reconnects >= 2, timeout=5, what="refused reconnects")
        assert reader.state.value == "reconnecting"
        camera = start_camera(port=camera.port)
        take(reader)  # a frame of the new server
        assert reader.state.value == "running"  # type: ignore[comparison-overlap]  # changed by the thread
    finally:
        assert reader.stop(2.0)


@pytest.mark.parametrize("mount", ["jpeg", "h264"])
def test_a_guarded_camera_is_read_through_a_relay_to_the_checked_address(
    start_camera: Callable[..., RtspCamera], mount: str
) -> None:
    # "camera.test" has no DNS entry: frames can only come through the relay, which connects to the
    # address the check resolved (FFmpeg is given the relay's address, never the name).
    camera = start_camera()
    url_of(camera, mount)
    url = f"rtsp://camera.test:{camera.port}/{mount}"
    guard = SourceGuard((url,), frozenset({"loopback"}), resolve=lambda host, port: ["127.0.0.1"])
    threads_before = threading.active_count()
    udp_before = udp_sockets()
    reader = reader_for(url, guard=guard, backoff_s=0.5)
    try:
        first = take(reader)
        assert first.to_rgb(1 << 24).shape == (HEIGHT, WIDTH, 3)
        assert take(reader, timeout=3).number > first.number
        assert udp_sockets() == udp_before  # RTP interleaved on the relayed connection
        camera.kill()  # the relay passes the end on, and a reconnect finds no camera
        wait_until(lambda: reader.state.value == "error", timeout=10, what="state error")
        reason = reader.state.last_error or ""
        assert "Connection refused" in reason and "2 attempts in a row" in reason, reason
    finally:
        assert reader.stop(2.0)
    # The relay's threads (and sockets) end with each open.
    wait_until(lambda: threading.active_count() <= threads_before, timeout=3, what="the relay's threads gone")


def test_a_frozen_camera_times_out_within_the_read_timeout(start_camera: Callable[..., RtspCamera]) -> None:
    camera = start_camera()
    reader = reader_for(camera.url("jpeg"), attempts=1)
    take(reader)
    camera.freeze()
    frozen = time.monotonic()
    wait_until(lambda: reader.state.value == "error", timeout=5, what="state error")
    assert time.monotonic() - frozen < 4  # the 1 s read timeout, not a hang
    assert "timed out" in (reader.state.last_error or "")
    assert reader.stop(0.5)


def test_a_session_on_an_rtsp_camera_sends_tracked_detections_and_shows_the_camera_dying(
    start_camera: Callable[..., RtspCamera], make_client: Callable[..., TestClient], toy_repo: Path
) -> None:
    camera = start_camera(pattern="white")  # white: the toy model's scores are high, every box is kept
    client = make_client(
        toy_repo,
        stream_sources=f"rtsp://127.0.0.1:{camera.port}/",
        stream_open_timeout_s=OPEN_TIMEOUT_S,
        stream_read_timeout_s=1.0,
        stream_reconnect_initial_s=0.05,
        stream_reconnect_attempts=2,
    )
    other = client.post("/v1/streams", json={"url": f"rtsp://127.0.0.1:{camera.port + 1}/jpeg"})
    assert other.status_code == 403 and other.json()["field"] == "url"
    created = client.post("/v1/streams", json={"url": camera.url("jpeg"), "fps": 15})
    assert created.status_code == 201, created.text
    stream_id = created.json()["id"]

    body: list[str] = []
    reading = threading.Thread(target=lambda: body.append(client.get(f"/v1/streams/{stream_id}/events").text))
    reading.start()
    wait_until(lambda: stream_info(client, stream_id)["subscribers"] == 1, what="the events client")
    wait_until(lambda: frames_processed(client, stream_id) >= 4, timeout=15, what="4 processed frames")
    state = stream_info(client, stream_id)
    assert state["state"] == "running" and state["last_error"] is None
    assert (state["width"], state["height"]) == (WIDTH, HEIGHT)
    snapshot = client.get(f"/v1/streams/{stream_id}/snapshot.jpg")
    assert snapshot.status_code == 200
    image = cv2.imdecode(np.frombuffer(snapshot.content, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None and image.shape == (HEIGHT, WIDTH, 3)
    assert not bool((image > 250).all())  # boxes and captions are drawn on the white frame

    camera.kill()
    wait_until(lambda: stream_info(client, stream_id)["state"] == "error", timeout=10, what="state error")
    state = stream_info(client, stream_id)
    assert "Connection refused" in str(state["last_error"]) and state["reconnects"] == 1
    assert client.get("/health/ready").status_code == 200
    assert client.delete(f"/v1/streams/{stream_id}").status_code == 204
    reading.join(10)
    assert not reading.is_alive()
    frames = [json.loads(line[6:]) for line in body[0].splitlines() if line.startswith('data: {"')]
    assert len(frames) >= 3
    last = frames[-1]
    assert (last["width"], last["height"]) == (WIDTH, HEIGHT)
    assert {d["label"] for d in last["detections"]} == {"cat", "dog", "bird"}
    ids = [sorted(d["track_id"] for d in f["detections"]) for f in frames[-3:]]
    assert None not in ids[0] and ids[0] == ids[1] == ids[2]  # the same boxes keep their track ids


def test_a_camera_password_opens_the_camera_and_is_never_reported(
    start_camera: Callable[..., RtspCamera],
    make_client: Callable[..., TestClient],
    toy_repo: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    camera = start_camera(login="admin:hunter2")
    good, bad = camera.url("jpeg", "admin:hunter2"), camera.url("jpeg", "admin:wrong-Pa55")
    client = make_client(
        toy_repo,
        stream_sources=f"{good.rsplit('/', 1)[0]}/,{bad.rsplit('/', 1)[0]}/",
        stream_open_timeout_s=OPEN_TIMEOUT_S,
        stream_read_timeout_s=1.0,
        stream_reconnect_initial_s=0.05,
        stream_reconnect_attempts=2,
    )
    caplog.set_level(logging.DEBUG)
    running = client.post("/v1/streams", json={"url": good}).json()["id"]
    refused = client.post("/v1/streams", json={"url": bad}).json()["id"]
    wait_until(lambda: frames_processed(client, running) >= 1, timeout=15, what="a processed frame")
    wait_until(lambda: stream_info(client, refused)["state"] == "error", timeout=10, what="the refused login")
    assert "401 Unauthorized" in str(stream_info(client, refused)["last_error"])
    camera.kill()
    wait_until(lambda: stream_info(client, running)["state"] == "error", timeout=10, what="the camera gone")
    assert "Connection refused" in str(stream_info(client, running)["last_error"])

    shown = client.get("/v1/streams").text + "".join(r.getMessage() for r in caplog.records)
    assert f"rtsp://admin:***@127.0.0.1:{camera.port}/jpeg" in shown
    assert "hunter2" not in shown and "wrong-Pa55" not in shown

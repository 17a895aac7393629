"""Every address a session connects to is checked, not only the posted URL: redirects (each hop, at every
reconnect), HLS variants, segments and keys, and the addresses a listed host name resolves to.

Everything runs on 127.0.0.1 with servers the test starts: the allowed sources (a scripted HTTP server, the
clip server, a fake RTSP camera) and a forbidden listener on another port, which counts the connections it
accepts. Each case asserts that the forbidden listener accepted none."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from listener_testkit import CountingListener, ScriptedServer
from service_testkit import wait_until

from bench.streams.sources import SourceServer
from service.streams.guard import AddressClass, Redirects, Resolver, SourceGuard
from service.streams.reader import FrameReader, NewestFrame, ReaderConfig
from service.streams.sources import PROTOCOL_WHITELIST
from service.streams.state import SessionState

HLS_HEAD = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:VOD\n"


@pytest.fixture(scope="module")
def clips() -> Iterator[SourceServer]:
    # 40 frames at 15 fps: an HLS playlist of three one-second segments.
    with SourceServer(fps=15, width=160, height=120, cycle=40) as server:
        yield server


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def forbidden() -> Iterator[CountingListener]:
    with CountingListener() as listener:
        yield listener


def guarded_reader(
    url: str,
    prefixes: tuple[str, ...],
    *,
    redirects: Redirects = "off",
    classes: frozenset[AddressClass] = frozenset({"public"}),
    resolve: Resolver | None = None,
    attempts: int = 3,
) -> FrameReader:
    guard = SourceGuard(prefixes, classes, redirects, **({"resolve": resolve} if resolve else {}))
    config = ReaderConfig(url, 15, 1 << 24, 1.0, 1.0, 0.05, 0.2, attempts, PROTOCOL_WHITELIST, 1.0, guard)
    reader = FrameReader(config, NewestFrame(lambda: None), SessionState())
    reader.start()
    return reader


def refused(reader: FrameReader, *names: str) -> str:
    """Wait (bounded) for state error; its reason, which must name each of ``names``."""
    wait_until(lambda: reader.state.value == "error", timeout=10, what="state error")
    assert reader.stop(2.0)
    reason = reader.state.last_error or ""
    for name in names:
        assert name in reason, reason
    return reason


@pytest.mark.parametrize("status", [301, 302, 307])
@pytest.mark.parametrize("policy", ["off", "same-allowlist"])
def test_a_redirect_to_another_port_is_refused_without_connecting(
    scripted: ScriptedServer, forbidden: CountingListener, status: int, policy: Redirects
) -> None:
    scripted.redirect("/cam", forbidden.url("elsewhere"), status)
    reader = guarded_reader(scripted.url("cam"), (scripted.base_url,), redirects=policy)
    reason = refused(reader, forbidden.url("elsewhere"))
    assert ("DETECT_STREAM_REDIRECTS is off" in reason) == (policy == "off")
    assert scripted.requests["/cam"] == 1  # refused at once: a refusal is not retried
    assert forbidden.accepted == 0


def test_a_redirect_chain_is_checked_hop_by_hop_and_refused_where_it_leaves(
    scripted: ScriptedServer, forbidden: CountingListener
) -> None:
    scripted.redirect("/a", scripted.url("b"), 301)
    scripted.redirect("/b", scripted.url("c"), 307)
    scripted.redirect("/c", forbidden.url("x"), 302)
    reader = guarded_reader(scripted.url("a"), (scripted.base_url,), redirects="same-allowlist")
    refused(reader, f"refused to follow the redirect from {scripted.url('c')}", forbidden.url("x"))
    assert scripted.requests == {"/a": 1, "/b": 1, "/c": 1}
    assert forbidden.accepted == 0


def test_a_redirect_to_another_scheme_is_refused(scripted: ScriptedServer) -> None:
    rtsp = scripted.base_url.replace("http://", "rtsp://")
    scripted.redirect("/cam", rtsp + "door")
    reader = guarded_reader(scripted.url("cam"), (scripted.base_url, rtsp), redirects="same-allowlist")
    refused(reader, f"to {rtsp}door", "not http or https")
    assert scripted.requests == {"/cam": 1}


def test_a_redirect_inside_the_allowlist_is_followed_only_when_the_setting_says_so(
    scripted: ScriptedServer, clips: SourceServer
) -> None:
    scripted.redirect("/cam", clips.url("mjpeg/redirected"))
    prefixes = (scripted.base_url, clips.base_url)
    reader = guarded_reader(scripted.url("cam"), prefixes, redirects="same-allowlist")
    try:
        wait_until(lambda: reader.frames_read >= 3, timeout=10, what="frames through the redirect")
    finally:
        assert reader.stop(2.0)
    reader = guarded_reader(scripted.url("cam"), prefixes, redirects="off")
    refused(reader, "refused to follow the redirect", clips.url("mjpeg/redirected"))


def test_a_redirect_that_changes_at_a_reconnect_is_checked_again(
    scripted: ScriptedServer, clips: SourceServer, forbidden: CountingListener
) -> None:
    # The first open is sent to the clip (allowed); when the clip ends, the reconnect is sent outside.
    scripted.answers["/clip"] = [
        (302, {"Location": clips.url("clip.mp4")}, b""),
        (302, {"Location": forbidden.url("clip.mp4")}, b""),
    ]
    prefixes = (scripted.base_url, clips.base_url)
    reader = guarded_reader(scripted.url("clip"), prefixes, redirects="same-allowlist")
    wait_until(lambda: reader.frames_read >= 1, timeout=10, what="the clip's first frame")
    refused(reader, forbidden.url("clip.mp4"))
    assert reader.frames_read >= 1 and scripted.requests["/clip"] == 2
    assert forbidden.accepted == 0


def segment_of(clips: SourceServer) -> str:
    return next(name for name in sorted(clips.hls) if name.endswith(".ts"))


@pytest.mark.parametrize("part", ["segment", "variant", "key"])
def test_an_hls_playlist_cannot_send_the_server_to_another_port(
    clips: SourceServer, forbidden: CountingListener, part: str
) -> None:
    outside = forbidden.url(f"hls/{part}")
    playlist = {
        "segment": f"{HLS_HEAD}#EXTINF:1.0,\n{outside}.ts\n#EXT-X-ENDLIST\n",
        "variant": f"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=100000\n{outside}.m3u8\n",
        "key": (
            f'{HLS_HEAD}#EXT-X-KEY:METHOD=AES-128,URI="{outside}.key"\n'
            f"#EXTINF:1.0,\n{clips.url('hls/' + segment_of(clips))}\n#EXT-X-ENDLIST\n"
        ),
    }[part]
    clips.hls[f"{part}.m3u8"] = playlist.encode()
    reader = guarded_reader(clips.url(f"hls/{part}.m3u8"), (clips.base_url,))
    refused(reader, outside)
    assert forbidden.accepted == 0


def test_an_hls_playlist_whose_parts_are_all_allowed_plays(clips: SourceServer) -> None:
    variant = clips.url("hls/index.m3u8")
    clips.hls["master.m3u8"] = f"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=100000\n{variant}\n".encode()
    reader = guarded_reader(clips.url("hls/master.m3u8"), (clips.base_url,))
    try:
        # Past the first segment: each segment is opened anew through the check (http_persistent=0; FFmpeg
        # would otherwise reuse its own connection, which a checked opener does not have, and abort).
        wait_until(lambda: reader.frames_read >= 20, timeout=10, what="frames of two segments")
    finally:
        assert reader.stop(2.0)


@pytest.mark.parametrize("scheme", ["http", "rtsp"])
def test_a_listed_name_that_resolves_to_a_forbidden_class_is_never_connected(
    forbidden: CountingListener, scheme: str
) -> None:
    def resolve(host: str, port: int) -> list[str]:
        assert host == "camera.test"
        return ["127.0.0.1"]

    url = f"{scheme}://camera.test:{forbidden.port}/door"
    prefix = f"{scheme}://camera.test:{forbidden.port}/"
    reader = guarded_reader(url, (prefix,), resolve=resolve)
    refused(reader, "camera.test is 127.0.0.1, a loopback address", "DETECT_STREAM_ADDRESS_CLASSES")
    assert forbidden.accepted == 0


def test_the_checked_address_is_the_one_connected_to(forbidden: CountingListener) -> None:
    # With loopback allowed the same name is opened; "camera.test" has no DNS entry, so the connection
    # reaching the listener went to the address the check resolved, not to a second resolution.
    def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    url = f"http://camera.test:{forbidden.port}/door"
    reader = guarded_reader(url, (url,), classes=frozenset({"loopback"}), resolve=resolve, attempts=1)
    started = time.monotonic()
    wait_until(lambda: reader.state.value == "error", timeout=10, what="state error")
    assert reader.stop(2.0) and time.monotonic() - started < 5
    assert forbidden.accepted == 1


def fake_camera_redirecting_to(target: str) -> tuple[int, threading.Thread]:
    """An RTSP server on 127.0.0.1 answering OPTIONS, then DESCRIBE with ``302 Location: target``."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)

    def serve() -> None:
        with server, contextlib.suppress(OSError):
            connection, _ = server.accept()
            with connection, connection.makefile("rb") as requests:
                for _ in range(2):
                    lines = []
                    while (line := requests.readline()) not in (b"\r\n", b""):
                        lines.append(line.decode().strip())
                    cseq = next(x.split(":", 1)[1].strip() for x in lines if x.lower().startswith("cseq"))
                    if lines[0].startswith("OPTIONS"):
                        answer = f"RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nPublic: OPTIONS, DESCRIBE\r\n\r\n"
                    else:
                        answer = f"RTSP/1.0 302 Moved\r\nCSeq: {cseq}\r\nLocation: {target}\r\n\r\n"
                    connection.sendall(answer.encode())

    thread = threading.Thread(target=serve, name="fake-rtsp", daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def test_an_rtsp_redirect_is_refused_without_connecting(forbidden: CountingListener) -> None:
    # FFmpeg's RTSP client would follow it by itself; the relay it talks through never passes it on.
    target = forbidden.url("door", scheme="rtsp")
    port, camera = fake_camera_redirecting_to(target)
    prefix = f"rtsp://127.0.0.1:{port}/"
    reader = guarded_reader(prefix + "door", (prefix,), attempts=3)
    refused(reader, f"refused to follow the redirect from {prefix}door to {target} (RTSP 302)")
    camera.join(5)
    assert not camera.is_alive()  # one connection, answered: a refusal is not retried
    assert forbidden.accepted == 0


def test_a_live_source_read_through_the_check_is_not_held_back() -> None:
    # Frames of ~700 bytes: had the checked client waited for FFmpeg's 32 KiB buffer to fill, frames would
    # come in bursts seconds apart instead of one every 1/15 s.
    small = [np.full((48, 64, 3), 255, np.uint8)] * 4
    with SourceServer(fps=15, frames=small) as camera:
        reader = guarded_reader(camera.url("mjpeg/live"), (camera.base_url,))
        try:
            times: list[float] = []
            deadline = time.monotonic() + 10
            while len(times) < 15 and time.monotonic() < deadline:
                if (frame := reader.slot.take()) is not None:
                    times.append(frame.captured_at)
                time.sleep(0.005)
        finally:
            assert reader.stop(2.0)
    assert len(times) == 15
    assert max(b - a for a, b in itertools.pairwise(times)) < 0.5

"""The RTSP relay an RTSP source under a guard is read through: what it passes on in each direction
(RTSP as FFmpeg's client reads it: lines, ``$`` interleaved frames, ``Content-Length`` bodies), the
redirects it never passes on, and where it connects (the checked address only). Everything runs on
127.0.0.1 with sockets the test opens; the real camera's case is in test_rtsp.py."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from listener_testkit import CountingListener
from tls_testkit import self_signed_server_context

from service.streams.guard import Checked, SourceRefused
from service.streams.rtsp_relay import Redirected, RtspRelay, _FromCamera, _FromClient

DESCRIBE_OK = b"RTSP/1.0 200 OK\r\nCSeq: 2\r\nContent-Length: 24\r\n\r\nv=0\r\nRTSP/1.0 302 Moved\r\n"


def frame(channel: int, payload: bytes) -> bytes:
    return b"$" + bytes([channel]) + len(payload).to_bytes(2, "big") + payload


def fed(stream: _FromCamera | _FromClient, data: bytes, chunk: int) -> bytes:
    return b"".join(stream.feed(data[i : i + chunk]) for i in range(0, len(data), chunk))


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 16])
def test_answers_frames_and_bodies_pass_unchanged_in_any_chunks(chunk: int) -> None:
    # The body and the frame's payload hold a redirect's text: FFmpeg reads neither as a message.
    data = (
        b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nPublic: OPTIONS, DESCRIBE\r\n\r\n"
        + DESCRIBE_OK
        + frame(0, b"RTSP/1.0 302 Moved\r\nLocation: rtsp://10.0.0.1/\r\n\r\n")
        + frame(1, b"")
        + b"GET_PARAMETER rtsp://cam/ RTSP/1.0\r\nCSeq: 9\r\n\r\n"
        + frame(0, bytes(range(256)) * 250)
    )
    assert fed(_FromCamera(), data, chunk) == data


@pytest.mark.parametrize(
    "head",
    [
        b"RTSP/1.0 302 Moved\r\nCSeq: 2\r\nLocation: rtsp://10.0.0.7/x\r\n\r\n",
        b"RTSP/1.0 301 Moved\nLocation:rtsp://10.0.0.7/x\n\n",  # bare newlines
        b"\r\rRTSP/1.0 3\r02 Moved\r\nLocation: rtsp://10.0.0.7/x\r\n\r\n",  # FFmpeg drops every \r
        b"RTSP/1.0   +0307 x\r\nLocation: rtsp://10.0.0.7/x\r\n\r\n",  # atoi("+0307")
        b"RTSP/1.0 4294967598 x\r\nLocation: rtsp://10.0.0.7/x\r\n\r\n",  # an int: 302
        b"RTSP/1.0\x1cx\t302 x\r\nLocation: rtsp://10.0.0.7/x\r\n\r\n",  # words split at spaces and tabs
        # Content-Length read into an int: 5, then the next message.
        b"RTSP/1.0 200 OK\r\nContent-Length: 4294967301\r\n\r\nv=0\r\n"
        b"RTSP/1.0 302 Moved\r\nLocation: rtsp://10.0.0.7/x\r\n\r\n",
        # A frame inside the head: FFmpeg skips it and goes on with the same head.
        b"RTSP/1.0 302 Moved\r\n" + frame(0, b"\r\n\r\n") + b"Location: rtsp://10.0.0.7/x\r\n\r\n",
        # A status line where FFmpeg may read one (after a frame that cut another message's head).
        b"SET_PARAMETER rtsp://cam/ RTSP/1.0\r\n" + frame(0, b"x" * 8) + b"RTSP/1.0 302 M\r\n"
        b"Location: rtsp://10.0.0.7/x\r\n\r\n",
    ],
)
@pytest.mark.parametrize("chunk", [1, 5, 1 << 16])
def test_a_redirect_is_never_passed_on(head: bytes, chunk: int) -> None:
    stream = _FromCamera()
    before = b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n" + frame(0, b"\x80" * 12)
    passed = stream.feed(before)
    with pytest.raises(Redirected) as raised:
        for i in range(0, len(head), chunk):
            passed += stream.feed(head[i : i + chunk])
    assert raised.value.location == "rtsp://10.0.0.7/x"
    assert raised.value.status in (301, 302, 307)
    assert passed.startswith(before) and b"302" not in passed and b"Location" not in passed


def test_a_redirect_without_a_location_is_refused_too() -> None:
    with pytest.raises(Redirected) as raised:
        _FromCamera().feed(b"RTSP/1.0 303 See Other\r\nCSeq: 2\r\n\r\n")
    assert raised.value.location is None


def test_request_lines_name_the_camera_and_nothing_else_changes() -> None:
    stream = _FromClient("rtsp://127.0.0.1:40000", "rtsp://camera.test:8554")
    data = (
        b"DESCRIBE rtsp://127.0.0.1:40000/door?x=1 RTSP/1.0\r\nCSeq: 2\r\n"
        b"Authorization: Basic YTpi\r\nX-Url: rtsp://127.0.0.1:40000/door\r\n\r\n"
        + frame(1, b"DESCRIBE rtsp://127.0.0.1:40000/ RTSP/1.0\r\n")  # RTCP: passed unread
        + b"SETUP rtsp://camera.test:8554/door/stream=0 RTSP/1.0\r\nCSeq: 3\r\n\r\n"
        + b"SET_PARAMETER rtsp://127.0.0.1:40000/door RTSP/1.0\r\nContent-Length: 5\r\n\r\nab\r\n\n"
    )
    assert fed(stream, data, 4) == data.replace(
        b"DESCRIBE rtsp://127.0.0.1:40000/door?x", b"DESCRIBE rtsp://camera.test:8554/door?x"
    ).replace(b"SET_PARAMETER rtsp://127.0.0.1:40000/", b"SET_PARAMETER rtsp://camera.test:8554/")


@contextlib.contextmanager
def fake_camera(answers: list[bytes], tls: ssl.SSLContext | None = None) -> Iterator[tuple[int, list[bytes]]]:
    """A server on 127.0.0.1 (TLS with ``tls``) that answers each request (a head ending with an empty
    line) with the next of ``answers``; yields its port and the requests' first lines."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    seen: list[bytes] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            connection, _ = server.accept()
            if tls is not None:
                connection = tls.wrap_socket(connection, server_side=True)
            with connection, connection.makefile("rb") as requests:
                for answer in answers:
                    head = [requests.readline()]
                    while head[-1] not in (b"\r\n", b""):
                        head.append(requests.readline())
                    seen.append(head[0])
                    connection.sendall(answer)

    thread = threading.Thread(target=serve, name="fake-camera", daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], seen
    finally:
        server.close()
        thread.join(5)


def exchange(relay: RtspRelay, request: bytes, expect: int) -> bytes:
    port = int(relay.url.split("127.0.0.1:", 1)[1].split("/", 1)[0])
    with socket.create_connection(("127.0.0.1", port), 5) as client:
        client.sendall(request)
        received = b""
        while len(received) < expect and (data := client.recv(4096)):
            received += data
        return received


def relay_threads() -> int:
    return sum(t.name.startswith("rtsp-relay") for t in threading.enumerate())


def test_the_relay_connects_to_the_checked_address_and_the_camera_sees_its_own_url() -> None:
    answer = b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nPublic: OPTIONS\r\n\r\n"
    with fake_camera([answer]) as (port, seen):
        # "camera.test" is not resolved again: the relay connects to the checked 127.0.0.1.
        url = f"rtsp://user:pw@camera.test:{port}/door"
        with RtspRelay(Checked(url, "rtsp", "camera.test", port, ("127.0.0.1",)), 2.0) as relay:
            assert relay.url.startswith("rtsp://user:pw@127.0.0.1:") and relay.url.endswith("/door")
            local = relay.url.replace("user:pw@", "")
            got = exchange(relay, f"OPTIONS {local} RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode(), len(answer))
        assert got == answer
        assert seen == [f"OPTIONS rtsp://camera.test:{port}/door RTSP/1.0\r\n".encode()]
    assert relay_threads() == 0


def test_an_rtsps_camera_is_reached_over_tls_while_ffmpeg_speaks_plain_rtsp_to_the_relay(
    tmp_path: Path,
) -> None:
    tls = self_signed_server_context(tmp_path)
    answer = b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n"
    with fake_camera([answer], tls) as (port, seen):
        url = f"rtsps://camera.test:{port}/door"
        with RtspRelay(Checked(url, "rtsps", "camera.test", port, ("127.0.0.1",)), 5.0) as relay:
            assert relay.url.startswith("rtsp://127.0.0.1:")
            got = exchange(relay, f"OPTIONS {relay.url} RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode(), len(answer))
        assert got == answer
        assert seen == [f"OPTIONS {url} RTSP/1.0\r\n".encode()]
    assert relay_threads() == 0


def test_the_relay_closes_both_sides_at_a_redirect_and_names_it(forbidden: CountingListener) -> None:
    location = f"rtsp://admin:secret@127.0.0.1:{forbidden.port}/door"
    moved = f"RTSP/1.0 302 Moved\r\nCSeq: 2\r\nLocation: {location}\r\n\r\n".encode()
    with fake_camera([b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n", moved]) as (port, _):
        url = f"rtsp://127.0.0.1:{port}/door"
        relay = RtspRelay(Checked(url, "rtsp", "127.0.0.1", port, ("127.0.0.1",)), 2.0)
        request = f"OPTIONS {relay.url} RTSP/1.0\r\nCSeq: 1\r\n\r\nDESCRIBE {relay.url} RTSP/1.0\r\n\r\n"
        got = exchange(relay, request.encode(), 1 << 20)  # until the relay closes the connection
        with pytest.raises(SourceRefused) as raised, relay:
            pass
    assert got == b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n"
    assert str(raised.value) == (
        f"refused to follow the redirect from {url} to rtsp://admin:***@127.0.0.1:{forbidden.port}/door "
        "(RTSP 302): RTSP redirects are never followed"
    )
    assert forbidden.accepted == 0
    assert relay_threads() == 0


def test_a_camera_that_does_not_answer_is_an_error_before_ffmpeg_is_started() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(ConnectionRefusedError):
        RtspRelay(Checked(f"rtsp://127.0.0.1:{port}/", "rtsp", "127.0.0.1", port, ("127.0.0.1",)), 2.0)
    assert relay_threads() == 0


@pytest.fixture
def forbidden() -> Iterator[CountingListener]:
    with CountingListener() as listener:
        yield listener

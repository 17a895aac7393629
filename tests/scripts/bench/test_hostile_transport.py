"""scripts/bench/hostile/transport.py reads raw HTTP responses with h11, from servers the test runs on
loopback."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "bench"))
from hostile.transport import read_reply

CHUNKED_WITH_TRAILER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    b'5\r\n{"a":\r\n2\r\n1}\r\n0\r\nx-trailer: yes\r\n\r\n'
)
LENGTH = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\nretry-after: 3\r\n\r\nno"
CLOSE_DELIMITED = b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil close"


def serve_once(payload: bytes, close: bool) -> Iterator[socket.socket]:
    """A loopback server that answers one connection with ``payload`` (then closes it if ``close``)."""
    listener = socket.create_server(("127.0.0.1", 0))
    peer: list[socket.socket] = []

    def answer() -> None:
        conn, _ = listener.accept()
        peer.append(conn)
        conn.sendall(payload)
        if close:
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    client = socket.create_connection(listener.getsockname(), timeout=5)
    try:
        yield client
    finally:
        thread.join(5)
        client.close()
        for conn in peer:
            conn.close()
        listener.close()


@pytest.mark.parametrize(
    ("payload", "close", "status", "body", "retry_after"),
    [
        (
            CHUNKED_WITH_TRAILER,
            False,
            "200",
            '{"a":1}',
            None,
        ),  # complete at the last chunk: no wait for close
        (LENGTH, False, "429", "no", "3"),
        (CLOSE_DELIMITED, True, "200", "until close", None),
        (b"HTTP/1.1 200 OK\r\ncontent-len", True, "partial-closed", "", None),
        (b"", True, "closed", "", None),
        (b"SSH-2.0-OpenSSH\r\n\r\n", False, "partial-bad-response", "", None),
    ],
    ids=["chunked-with-trailer", "content-length", "close-delimited", "cut-headers", "no-answer", "not-http"],
)
def test_replies_are_framed_as_http_says(
    payload: bytes, close: bool, status: str, body: str, retry_after: str | None
) -> None:
    for client in serve_once(payload, close):
        reply = read_reply(client, timeout=5)
        assert (reply.status.split(":")[0], reply.body, reply.retry_after) == (status, body, retry_after)
        assert reply.seconds < 4, "a complete response is returned without waiting for the timeout"


def test_a_silent_server_times_out() -> None:
    for client in serve_once(b"HTTP/1.1 200 OK\r\n", close=False):
        assert read_reply(client, timeout=0.3).status == "partial-timeout"

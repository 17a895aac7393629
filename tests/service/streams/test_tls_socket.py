"""service/streams/tls_socket.py: one thread reading while another writes loses nothing, and the end of the
connection reads as ``b""``. A TLS server the test starts on 127.0.0.1 (a self-signed certificate)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tls_testkit import self_signed_server_context

from service.streams.tls_socket import TlsSocket


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@contextlib.contextmanager
def tls_server(tls: ssl.SSLContext, handle: Callable[[ssl.SSLSocket], None]) -> Iterator[int]:
    """One TLS connection on 127.0.0.1, given to ``handle``; yields the port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def serve() -> None:
        with contextlib.suppress(OSError):
            connection, _ = server.accept()
            with tls.wrap_socket(connection, server_side=True) as secure:
                handle(secure)

    thread = threading.Thread(target=serve, name="tls-server", daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        thread.join(10)


def echo(secure: ssl.SSLSocket) -> None:
    while data := secure.recv(65536):
        secure.sendall(data)


def test_a_reader_and_a_writer_at_once_lose_nothing(tmp_path: Path) -> None:
    # Many writes while the answers are being read, as the relay's two pumps do on the camera's connection.
    messages = [
        f"OPTIONS rtsp://cam/{i} RTSP/1.0\r\nCSeq: {i}\r\n\r\n".encode() * (1 + i % 40) for i in range(400)
    ]
    expected = b"".join(messages)
    with tls_server(self_signed_server_context(tmp_path), echo) as port:
        raw = socket.create_connection(("127.0.0.1", port), 10)
        connection = TlsSocket(raw, client_context(), "camera.test")
        raw.settimeout(20)

        def write() -> None:
            for message in messages:
                connection.sendall(message)

        writer = threading.Thread(target=write, name="writer")
        received = bytearray()
        writer.start()
        try:
            while len(received) < len(expected) and (data := connection.recv(65536)):
                received += data
        finally:
            writer.join(20)
            connection.close()
    assert bytes(received) == expected


@pytest.mark.parametrize("close_notify", [True, False], ids=["tls-close", "tcp-close"])
def test_the_end_of_the_connection_reads_as_empty(tmp_path: Path, close_notify: bool) -> None:
    def answer_and_close(secure: ssl.SSLSocket) -> None:
        secure.sendall(b"RTSP/1.0 200 OK\r\n\r\n")
        if close_notify:
            secure.unwrap().close()
        else:
            secure.shutdown(socket.SHUT_RDWR)

    with tls_server(self_signed_server_context(tmp_path), answer_and_close) as port:
        connection = TlsSocket(socket.create_connection(("127.0.0.1", port), 10), client_context(), "cam")
        received = b""
        while data := connection.recv(65536):
            received += data
        connection.close()
    assert received == b"RTSP/1.0 200 OK\r\n\r\n"


def test_a_camera_that_closes_during_the_handshake_is_an_error() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    with server:
        raw = socket.create_connection(server.getsockname(), 10)
        accepted, _ = server.accept()
        accepted.close()
        with pytest.raises(OSError), raw:
            TlsSocket(raw, client_context(), "cam")

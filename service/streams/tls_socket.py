"""A TLS client connection that one thread may read while another writes: the RTSP relay's camera side
(`service.streams.rtsp_relay`), which one thread pumps toward FFmpeg while another pumps FFmpeg's requests
to the camera.

An `ssl.SSLSocket` cannot be used so: OpenSSL's SSL objects are not safe to read in one thread while
another writes, and under load a request written while an answer was being read was lost (the camera
never saw it, and the relay waited for its answer). Here the TLS state is an `ssl.SSLObject` over memory
buffers, touched only under a lock, and the socket itself is read and written outside it; a second lock
keeps the encrypted bytes going out in the order TLS produced them.
"""

from __future__ import annotations

import socket
import ssl
import threading

_CHUNK = 65536


class TlsSocket:
    """TLS over ``sock`` as a client of ``server_hostname``, the handshake done on creation (within the
    socket's timeout). `recv`, `sendall`, `shutdown` and `close` as on a socket; `recv` returns ``b""``
    once the camera closes the connection (with or without TLS's close)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._sock = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._state = threading.Lock()  # the TLS object and its buffers
        self._sending = threading.Lock()  # taken before _state: bytes leave in the order TLS made them
        while True:
            try:
                with self._state:
                    self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._receive():
                    raise ConnectionError(
                        "the camera closed the connection during the TLS handshake"
                    ) from None
        self._flush()

    def sendall(self, data: bytes) -> None:
        with self._sending:
            with self._state:
                view = memoryview(data)
                while view:
                    view = view[self._tls.write(view) :]
                encrypted = self._outgoing.read()
            self._sock.sendall(encrypted)

    def recv(self, size: int) -> bytes:
        while True:
            with self._state:
                try:
                    data: bytes | None = self._tls.read(size)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return b""
                answer_due = self._outgoing.pending > 0  # e.g. TLS 1.3's reply to a key update
            if answer_due:
                self._flush()
            if data is not None:
                return data
            if not self._receive():
                return b""

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def _receive(self) -> bool:
        """Encrypted bytes from the socket into TLS's buffer; False at the end of the connection."""
        raw = self._sock.recv(_CHUNK)
        with self._state:
            if raw:
                self._incoming.write(raw)
            else:
                self._incoming.write_eof()
        return bool(raw)

    def _flush(self) -> None:
        with self._sending:
            with self._state:
                encrypted = self._outgoing.read()
            if encrypted:
                self._sock.sendall(encrypted)

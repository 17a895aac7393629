"""RTSP for stream sessions through a relay that connects only where the check said: one per open.

FFmpeg's RTSP client follows a ``3xx`` answer (``Location``) by itself, opening a new connection without
passing through PyAV's ``io_open``, and resolves the camera's name again when it connects. So an RTSP
source under a guard is not given to FFmpeg as it is: `RtspRelay`

- connects to the address `SourceGuard.check` resolved (never resolving the name again), with TLS for
  ``rtsps`` (the URL's host as the server name, the certificate not verified, as FFmpeg's default);
- listens on 127.0.0.1 on a port the system picks, and FFmpeg is given the same URL with that address
  (``url``; user and password kept, the relay speaks plain RTSP to it);
- pumps the bytes both ways, reading the RTSP messages as FFmpeg reads them (lines, ``$`` interleaved
  frames, ``Content-Length`` bodies): a ``3xx`` answer from the camera is never passed on: both sides are
  closed and `refusal` names where it pointed (`SourceRefused`); the request lines FFmpeg sends name the
  camera's own address again, so the camera sees its own URL.

A relay serves one open of the source (``with``): closing it closes its sockets and ends its threads. RTP
must come interleaved on the RTSP connection (``rtsp_transport=tcp``, which the reader sets): FFmpeg
then opens no other connection.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urljoin, urlsplit, urlunsplit

from service.streams.guard import Checked, SourceRefused
from service.streams.sources import redact
from service.streams.tls_socket import TlsSocket

# Connections FFmpeg may open to one relay (it opens one with RTSP over TCP; a few more cost nothing).
MAX_CONNECTIONS = 4
# A line of an RTSP head is cut here when scanned (FFmpeg keeps 4095 bytes of a line, MAX_URL_SIZE).
_LINE_KEPT = 4095
# The most bytes of a 3xx answer's head read to find its Location before refusing without it.
_REDIRECT_HEAD_MAX = 65536
_CHUNK = 65536
# A longer line is not RTSP: the connection is closed rather than hold it back.
_LINE_MAX = 65536
# A status line's first two words, as FFmpeg's get_word splits them (on spaces and tabs only).
_WORDS = re.compile(r"[ \t]*([^ \t]*)[ \t]*([^ \t]*)")
_NUMBER = re.compile(r"[ \t\n\v\f\r]*([+-]?)([0-9]*)")


class RtspStream:
    """One direction of an RTSP connection, scanned as FFmpeg's ``ff_rtsp_read_reply`` reads it: lines
    ending with ``\\n`` (every ``\\r`` dropped), a ``$`` at the start of a line is an interleaved frame
    (channel, 2-byte big-endian length, payload) passed on unread, an empty line ends a message's head, and
    a ``Content-Length`` body follows it. `line` sees each complete head line (``first``: a message's
    first) and returns what to send for it; `feed` returns what may be passed on so far."""

    def __init__(self) -> None:
        self._pending = bytearray()  # a line not complete yet (held back until it is)
        self._pass = 0  # bytes to pass on unread (a frame's payload, a body)
        self._frame_head = -1  # bytes of a frame's 3-byte header still to come (-1: not in one)
        self._frame_bytes = bytearray()
        self._first = True  # the next line is a message's first
        self._content_length = 0

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        try:
            self._feed(data, out)
        except Redirected as redirect:
            redirect.passed = bytes(out)  # what came before it
            raise
        return bytes(out)

    def _feed(self, data: bytes, out: bytearray) -> None:
        view = memoryview(data)
        while view:
            if self._pass:
                n = min(self._pass, len(view))
                out += view[:n]
                view = view[n:]
                self._pass -= n
            elif self._frame_head >= 0:
                n = min(3 - len(self._frame_bytes), len(view))
                self._frame_bytes += view[:n]
                view = view[n:]
                if len(self._frame_bytes) == 3:
                    out += self._frame_bytes
                    self._pass = int.from_bytes(self._frame_bytes[1:3], "big")
                    self._frame_head, self._frame_bytes = -1, bytearray()
            elif not self._pending.replace(b"\r", b"") and view[0] == 0x24:  # "$" at a line's start
                out += self._pending + b"$"
                self._pending = bytearray()
                view = view[1:]
                self._frame_head = 0
            else:
                end = bytes(view).find(b"\n")
                if end < 0:
                    self._pending += view
                    if len(self._pending) > _LINE_MAX:
                        raise NotRtsp(f"a line of more than {_LINE_MAX} bytes")
                    break
                self._pending += view[: end + 1]
                view = view[end + 1 :]
                out += self._line(bytes(self._pending))
                self._pending = bytearray()

    def _line(self, raw: bytes) -> bytes:
        text = raw.replace(b"\r", b"")[:-1][:_LINE_KEPT].decode("latin-1")
        first = self._first
        if not text:  # the end of a message's head: its body follows
            self._first = True
            self._pass, self._content_length = max(self._content_length, 0), 0
        else:
            self._first = False
            if not first and text[:15].lower() == "content-length:":
                self._content_length = _c_int(text[15:])
        return self.line(raw, text, first)

    def line(self, raw: bytes, text: str, first: bool) -> bytes:
        """What to send for the head line ``raw`` (``text``: as FFmpeg reads it, empty at the end of a
        head); ``raw`` by default."""
        return raw


class _FromCamera(RtspStream):
    """The camera's side: a status line ``RTSP/x 3xx`` is held back with the rest of its head, and
    `Redirected` raised with its Location. Any head line is taken for a status line: while opening (when
    FFmpeg follows a redirect) it reads a message across interleaved frames as this scanner does, but once
    playing a frame ends the message it was in, and its next line is a new message's first."""

    def __init__(self) -> None:
        super().__init__()
        self._redirect: int | None = None
        self._location: str | None = None
        self._held = 0

    def line(self, raw: bytes, text: str, first: bool) -> bytes:
        if self._redirect is not None and not text:  # the redirect's head is complete
            raise Redirected(self._redirect, self._location)
        if self._redirect is None:
            words = _WORDS.match(text)
            assert words is not None  # the pattern matches any text
            version, status = words.groups()
            if version.startswith("RTSP/") and 300 <= _c_int(status) < 400:
                self._redirect = _c_int(status)
        elif text[:9].lower() == "location:":
            self._location = text[9:].strip()
        if self._redirect is None:
            return raw
        self._held += len(raw)
        if self._held > _REDIRECT_HEAD_MAX:
            raise Redirected(self._redirect, self._location)
        return b""


class _FromClient(RtspStream):
    """FFmpeg's side: a request line naming the relay (``METHOD rtsp://127.0.0.1:PORT/path RTSP/1.0``)
    names the camera's own address instead."""

    def __init__(self, relay_base: str, camera_base: str) -> None:
        super().__init__()
        self._relay_base = relay_base.encode()
        self._camera_base = camera_base.encode()

    def line(self, raw: bytes, text: str, first: bool) -> bytes:
        method, space, rest = raw.partition(b" ")
        if first and text and space and rest.lower().startswith(self._relay_base.lower()):
            return method + b" " + self._camera_base + rest[len(self._relay_base) :]
        return raw


class NotRtsp(OSError):
    """What came is not RTSP as FFmpeg reads it (the connection is closed)."""


class Redirected(Exception):
    def __init__(self, status: int, location: str | None) -> None:
        super().__init__(status, location)
        self.status = status
        self.location = location
        self.passed = b""  # what the stream passed on before it, from the same bytes


class RtspRelay:
    """See the module docstring. Connects to the camera when made (an `OSError` if it cannot: the session
    reconnects); `url` is what FFmpeg opens; `close` (or leaving ``with``) ends it, and raises its
    `refusal` when the camera answered with a redirect."""

    def __init__(self, checked: Checked, connect_timeout_s: float) -> None:
        self._checked = checked
        self._timeout = connect_timeout_s
        self.refusal: SourceRefused | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sockets: list[socket.socket | TlsSocket] = []
        self._threads: list[threading.Thread] = []
        self._first_upstream: socket.socket | TlsSocket | None = self._connect()
        self._sockets.append(self._first_upstream)
        try:
            self._listener = socket.create_server(("127.0.0.1", 0))
        except OSError:
            self._first_upstream.close()
            raise
        self._listener.settimeout(0.1)
        self._sockets.append(self._listener)
        port = self._listener.getsockname()[1]
        parts = urlsplit(checked.url)
        login = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        self.url = urlunsplit(parts._replace(scheme="rtsp", netloc=f"{login}127.0.0.1:{port}"))
        camera_base = f"{checked.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
        self._bases = (f"rtsp://127.0.0.1:{port}", camera_base)
        self._start(self._accept, "rtsp-relay")

    def _connect(self) -> socket.socket | TlsSocket:
        """A connection to the first checked address that answers (TLS for rtsps: `TlsSocket`, which the
        two pumps may use at once)."""
        error: OSError | None = None
        for ip in self._checked.addresses:
            try:
                connection = socket.create_connection((ip, self._checked.port), self._timeout)
            except OSError as exc:
                error = exc
                continue
            try:
                if self._checked.scheme != "rtsps":
                    connection.settimeout(None)
                    return connection
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE  # as FFmpeg's rtsps (tls_verify=0)
                tls = TlsSocket(connection, context, self._checked.host)
                tls.settimeout(None)
                return tls
            except OSError:
                connection.close()
                raise
        assert error is not None  # a Checked has at least one address
        raise error

    def _start(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        accepted = 0
        while not self._closed.is_set() and accepted < MAX_CONNECTIONS:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted += 1
            client.settimeout(None)
            with self._lock:
                upstream, self._first_upstream = self._first_upstream, None
            try:
                upstream = upstream or self._connect()
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed.is_set():
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            self._start(self._pump, "rtsp-relay-up", client, upstream, _FromClient(*self._bases))
            self._start(self._pump, "rtsp-relay-down", upstream, client, _FromCamera())

    def _pump(
        self, source: socket.socket | TlsSocket, sink: socket.socket | TlsSocket, stream: RtspStream
    ) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(stream.feed(data))
        except Redirected as redirect:
            with contextlib.suppress(OSError):
                sink.sendall(redirect.passed)
            self._refuse(redirect)
        except OSError:
            pass
        for end in (source, sink):  # one side ended: so does the other
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def _refuse(self, redirect: Redirected) -> None:
        url = self._checked.url
        target = "an unnamed address" if not redirect.location else redact(urljoin(url, redirect.location))
        self.refusal = SourceRefused(
            f"refused to follow the redirect from {redact(url)} to {target} (RTSP {redirect.status}): "
            "RTSP redirects are never followed"
        )
        self.close()

    def close(self) -> None:
        """Close every socket; the threads end with them (joined, bounded, when not one of them)."""
        with self._lock:
            self._closed.set()
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current and thread.ident is not None:
                thread.join(1.0)

    def __enter__(self) -> RtspRelay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
        if self.refusal is not None:
            raise self.refusal


def _c_int(text: str) -> int:
    """C's ``(int) strtol(text, NULL, 10)``, what FFmpeg's ``atoi`` of a status and its ``strtol`` of a
    Content-Length into an int give: leading spaces, a sign, digits (0 when none), clamped to a long and
    cut to 32 bits (``4294967598`` is 302)."""
    number = _NUMBER.match(text)
    assert number is not None  # the pattern matches any text
    sign, digits = number.groups()
    value = min(int(digits or "0"), 2**63 - 1 if sign != "-" else 2**63)
    value = -value if sign == "-" else value
    return (value + 2**31) % 2**32 - 2**31

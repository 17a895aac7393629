"""HTTP(S) for stream sessions, checked at every connection: what FFmpeg reads an http source through.

FFmpeg follows an HTTP redirect inside its http protocol, and an HLS playlist makes it open variant
playlists, segments and keys wherever they are: none of that passes through a check of the URL. So an
http(s) source is opened with PyAV's ``io_open`` callback (`Opener`): every URL FFmpeg opens for the
session (the source itself, each playlist, segment, key, init section) comes here, and this module

- checks it (`SourceGuard.check`: allowed prefix, and resolved addresses of an allowed class) before any
  connection is made;
- connects to the very address it checked (the Host header and the TLS server name keep the URL's host),
  so a changed DNS answer cannot move the connection (DNS rebinding);
- follows a redirect only when ``stream_redirects`` is ``same-allowlist``, checking each hop the same
  way (at most `MAX_REDIRECTS` hops); with ``off`` (the default) a redirect is an error naming where it
  pointed. Every reconnect goes through here again.

A refusal raises `SourceRefused` (the session goes to ``error`` naming the refused address, password
hidden). TLS is set up as FFmpeg's https default (encrypted, the certificate not verified).
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from service.streams.guard import Checked, SourceGuard, SourceRefused
from service.streams.sources import redact

MAX_REDIRECTS = 5
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})


class SourceHTTPError(OSError):
    """The source answered an HTTP error (4xx, 5xx): the message has its status and the URL."""


class Body:
    """A response body as FFmpeg reads it (read only: not seekable), closing its connection with it."""

    def __init__(self, response: http.client.HTTPResponse, connection: http.client.HTTPConnection):
        self._response = response
        self._connection = connection
        self.on_close: Callable[[Body], None] = lambda body: None

    def read(self, size: int = -1) -> bytes:
        # What has arrived, up to ``size``: a live source's frame is handed on as it comes, not held
        # until FFmpeg's whole buffer (32 KiB, many small MJPEG frames) is full.
        try:
            return self._response.read1(size) if size > 0 else self._response.read()
        except http.client.HTTPException as exc:  # a chunked body cut short, ...
            raise SourceHTTPError(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self._response.close()
        self._connection.close()
        self.on_close(self)


class Opener:
    """PyAV's ``io_open`` for one open of a session's source: ``(url, flags, options) -> Body``, each URL
    fetched by `fetch`. A context manager: PyAV closes the bodies it opens from inside a source (HLS
    segments) but not the source's own, so whatever is still open is closed on exit."""

    def __init__(self, guard: SourceGuard, open_timeout_s: float, read_timeout_s: float):
        self._guard = guard
        self._timeouts = (open_timeout_s, read_timeout_s)
        self._open: set[Body] = set()

    def __call__(self, url: str, flags: int, options: Mapping[str, Any]) -> Body:
        body = fetch(url, self._guard, *self._timeouts, _byte_range(options))
        body.on_close = self._open.discard
        self._open.add(body)
        return body

    def __enter__(self) -> Opener:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for body in list(self._open):
            body.close()


def fetch(
    url: str,
    guard: SourceGuard,
    open_timeout_s: float,
    read_timeout_s: float,
    byte_range: tuple[int, int | None] | None = None,
) -> Body:
    """GET ``url``, every hop checked; `SourceRefused`, `SourceHTTPError` or `OSError` otherwise."""
    origin = _origin(url)
    checked = _check_http(guard, url)
    for _ in range(MAX_REDIRECTS + 1):
        connection = _connect(checked, open_timeout_s)
        try:
            connection.request("GET", _target(url), headers=_headers(url, origin, byte_range))
            response = connection.getresponse()
        except http.client.HTTPException as exc:  # not an HTTP answer
            connection.close()
            raise SourceHTTPError(f"{type(exc).__name__} from {redact(url)}: {exc}") from exc
        except BaseException:
            connection.close()
            raise
        if response.status in _REDIRECT_CODES:
            location = response.getheader("Location")
            connection.close()
            if not location:
                raise SourceHTTPError(f"HTTP {response.status} without a Location from {redact(url)}")
            target = urljoin(url, location)
            hop = f"the redirect from {redact(url)} to {redact(target)} (HTTP {response.status})"
            if guard.redirects == "off":
                raise SourceRefused(f"refused to follow {hop}: DETECT_STREAM_REDIRECTS is off")
            try:
                checked = _check_http(guard, target)
            except SourceRefused as exc:
                raise SourceRefused(f"refused to follow {hop}: {exc}") from exc
            url = target
            continue
        if response.status >= 400:
            connection.close()
            raise SourceHTTPError(f"HTTP {response.status} {response.reason} from {redact(url)}")
        if connection.sock is not None:
            connection.sock.settimeout(read_timeout_s)
        return Body(response, connection)
    raise SourceRefused(f"refused to follow more than {MAX_REDIRECTS} redirects (last: {redact(url)})")


def _check_http(guard: SourceGuard, url: str) -> Checked:
    """`SourceGuard.check`, for http and https only (this client speaks nothing else)."""
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        raise SourceRefused(f"refused to open {redact(url)}: not http or https")
    return guard.check(url)


class _CheckedHTTPS(http.client.HTTPSConnection):
    """HTTPS to an address already checked, with the URL's host as the TLS server name."""

    def __init__(self, address: str, port: int, server_name: str, timeout: float):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # as FFmpeg's https (tls_verify=0)
        super().__init__(address, port, timeout=timeout, context=context)
        self._server_name = server_name
        self._context = context

    def connect(self) -> None:
        plain = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(plain, server_hostname=self._server_name)


def _connect(checked: Checked, timeout_s: float) -> http.client.HTTPConnection:
    """A connection to the first of the checked addresses that answers (never to another one)."""
    error: OSError | None = None
    for ip in checked.addresses:
        connection: http.client.HTTPConnection
        if checked.scheme == "https":
            connection = _CheckedHTTPS(ip, checked.port, checked.host, timeout_s)
        else:
            connection = http.client.HTTPConnection(ip, checked.port, timeout=timeout_s)
        try:
            connection.connect()
            return connection
        except OSError as exc:
            connection.close()
            error = exc
    assert error is not None  # a Checked has at least one address
    raise error


def _target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _headers(url: str, origin: str, byte_range: tuple[int, int | None] | None) -> dict[str, str]:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    headers = {"Host": host, "User-Agent": "detect-stream", "Accept": "*/*"}
    # A password in the URL is sent to its own origin only, never to where a redirect points.
    if parts.username is not None and _origin(url) == origin:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(user_pass.encode()).decode()
    if byte_range is not None:
        start, end = byte_range
        headers["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
    return headers


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.rsplit('@', 1)[-1].lower()}"


def _byte_range(options: Mapping[str, Any]) -> tuple[int, int | None] | None:
    """FFmpeg's ``offset`` / ``end_offset`` options (an HLS byte-range segment) as a range."""
    start = int(options.get("offset") or 0)
    end = int(options["end_offset"]) if options.get("end_offset") else None
    return (start, end) if start or end is not None else None

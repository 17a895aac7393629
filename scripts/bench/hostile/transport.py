"""HTTP over httpx and over raw sockets; network failures become statuses, never exceptions."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Mapping
from typing import Any

import h11
import httpx

from hostile.common import CONNECT_TIMEOUT_S, HOST, MAX_REPLY_BYTES, SNIPPET_CHARS, Reply

# -------------------------------------------------------------------------------------------- transport


def classify(exc: BaseException) -> str:
    """A short label for a network failure."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "timeout"
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return "refused"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "closed"
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return "reset"
        seen = seen.__cause__ or seen.__context__
    return f"error:{type(exc).__name__}"


def snippet(data: bytes) -> str:
    return data[:SNIPPET_CHARS].decode("utf-8", "replace").replace("\n", " ").replace("\r", "")


def http_call(
    method: str, url: str, *, timeout: float, client: httpx.Client | None = None, **kwargs: Any
) -> Reply:
    """One HTTP exchange as a `Reply`; never raises for network trouble."""
    started = time.monotonic()
    try:
        if client is not None:
            response = client.request(method, url, timeout=timeout, **kwargs)
        else:
            response = httpx.request(method, url, timeout=timeout, **kwargs)
    except (httpx.HTTPError, OSError) as exc:
        return Reply(classify(exc), time.monotonic() - started)
    return Reply(
        str(response.status_code),
        time.monotonic() - started,
        snippet(response.content),
        response.headers.get("content-type", ""),
        response.headers.get("retry-after"),
    )


def open_raw(port: int) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=CONNECT_TIMEOUT_S)


def raw_head(port: int, auth: Mapping[str, str], path: str, content_length: int, content_type: str) -> bytes:
    """The head of a POST to the server on ``port``, with the ``auth`` headers."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {HOST}:{port}",
        f"Content-Type: {content_type}",
        f"Content-Length: {content_length}",
        *(f"{key}: {value}" for key, value in auth.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class ResponseReader:
    """One HTTP/1.1 response read off a raw socket, framed by h11 (Content-Length, chunked with or without
    trailers, or delimited by the connection closing)."""

    def __init__(self) -> None:
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_REPLY_BYTES)
        # h11 reads a response only after a request: this stands for the one a case already wrote by hand.
        self.conn.send(
            h11.Request(method="POST", target="/", headers=[("Host", HOST), ("Content-Length", "0")])
        )
        self.conn.send(h11.EndOfMessage())
        self.received = 0
        self.response: h11.Response | None = None
        self.body = bytearray()
        self.complete = False
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        """Take ``data`` off the socket (``b""``: the peer closed it)."""
        self.received += len(data)
        self.conn.receive_data(data)
        while not self.complete:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                self.complete = True
                if data:  # not just the peer closing early: what it sent is not HTTP
                    self.error = f"bad-response:{str(exc)[:40]}"
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Response):
                self.response = event
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                self.complete = True

    def reply(self, failure: str | None, seconds: float) -> Reply:
        if self.response is None:
            status = self.error or failure or "closed"
            return Reply(status if not self.received else f"partial-{status}", seconds)
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in self.response.headers}
        return Reply(
            str(self.response.status_code),
            seconds,
            snippet(bytes(self.body)),
            headers.get("content-type", ""),
            headers.get("retry-after"),
        )


def read_reply(sock: socket.socket, timeout: float) -> Reply:
    """Read one HTTP response from a raw socket within ``timeout`` seconds."""
    started = time.monotonic()
    deadline = started + timeout
    reader = ResponseReader()
    failure: str | None = None
    while not reader.complete and reader.received < MAX_REPLY_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            failure = "timeout"
            break
        try:
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
        except OSError as exc:
            failure = classify(exc)
            break
        reader.feed(chunk)
        if not chunk:
            failure = "closed"
            break
    return reader.reply(failure, time.monotonic() - started)


def replies_of(socks: list[socket.socket | None], errors: list[str | None], timeout: float) -> list[Reply]:
    """For each held connection: its answer if one is waiting, else ``no-answer`` (or its send error)."""
    live = [s for s in socks if s is not None]
    try:
        readable = set(select.select(live, [], [], 0)[0]) if live else set()
    except (OSError, ValueError):
        readable = set()
    replies = []
    for sock, error in zip(socks, errors, strict=True):
        if sock is not None and sock in readable:
            replies.append(read_reply(sock, timeout))
        else:
            replies.append(Reply(f"send-{error}" if error else "no-answer", 0.0))
    return replies


def close_all(socks: list[socket.socket | None]) -> None:
    for sock in socks:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

"""HTTP over httpx and over raw sockets; network failures become statuses, never exceptions."""

from __future__ import annotations

import contextlib
import re
import select
import socket
import time
from collections.abc import Mapping
from typing import Any

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


def _head_end(buf: bytes | bytearray) -> int:
    return buf.find(b"\r\n\r\n")


def _header(head: bytes, name: bytes) -> bytes | None:
    match = re.search(rb"\r\n" + name + rb":[ \t]*([^\r]*)", head, re.IGNORECASE)
    return match.group(1).strip() if match else None


def _response_complete(buf: bytearray) -> bool:
    end = _head_end(buf)
    if end < 0:
        return False
    head = bytes(buf[:end])
    if b"chunked" in (_header(head, b"transfer-encoding") or b"").lower():
        return buf.endswith(b"0\r\n\r\n")
    length = _header(head, b"content-length")
    return length is not None and length.isdigit() and len(buf) - end - 4 >= int(length)


def dechunk(body: bytes) -> bytes:
    """The payload of a chunked body (best effort: stops at the first malformed chunk)."""
    out = bytearray()
    pos = 0
    for _ in range(10_000):
        line_end = body.find(b"\r\n", pos)
        try:
            size = int(body[pos:line_end].split(b";")[0], 16) if line_end >= 0 else 0
        except ValueError:
            break
        if size == 0:
            break
        out += body[line_end + 2 : line_end + 2 + size]
        pos = line_end + 2 + size + 2
    return bytes(out)


def parse_raw(buf: bytes, failure: str | None, seconds: float) -> Reply:
    end = _head_end(buf)
    if end < 0:
        status = failure or "closed"
        return Reply(status if not buf else f"partial-{status}", seconds, snippet(buf))
    head = buf[:end]
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    status = parts[1] if len(parts) > 1 else f"bad-status-line:{status_line[:30]}"
    body = buf[end + 4 :]
    if b"chunked" in (_header(head, b"transfer-encoding") or b"").lower():
        body = dechunk(body)
    content_type = (_header(head, b"content-type") or b"").decode("latin-1")
    retry_after = _header(head, b"retry-after")
    return Reply(
        status, seconds, snippet(body), content_type, retry_after.decode("latin-1") if retry_after else None
    )


def read_reply(sock: socket.socket, timeout: float) -> Reply:
    """Read one HTTP response from a raw socket within ``timeout`` seconds."""
    started = time.monotonic()
    deadline = started + timeout
    buf = bytearray()
    failure: str | None = None
    while len(buf) < MAX_REPLY_BYTES:
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
        if not chunk:
            failure = "closed"
            break
        buf += chunk
        if _response_complete(buf):
            break
    return parse_raw(bytes(buf), failure, time.monotonic() - started)


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

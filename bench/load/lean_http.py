"""A lean HTTP/1.1 client for the open-loop load generator: keep-alive connections on asyncio's
protocol layer, one request in flight per connection, the request bytes built once.

A load client on the same cores takes CPU from the server it measures, and a busy client sends late
(which the open loop counts as latency). httpx spends ~2 ms of CPU per request here; this spends a
fraction of that (`detect-bench http --arrival poisson` reports the client's CPU per request), at the
price of understanding only what the service answers: a status line, headers with ``Content-Length``,
and a body of that length (no chunked encoding, no redirects, no TLS).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The server's answer is not one this client understands (chunked, no length, malformed)."""


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._length: int | None = None  # body length once the headers are in
        self._status = 0
        self._header_end = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError(f"connection closed mid-answer: {exc}"))

    def request(self, data: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self._buffer.clear()
        self._length = None
        self.transport.write(data)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            if self._length is None and not self._parse_head():
                return
        except ProtocolError as exc:
            waiter.set_exception(exc)
            assert self.transport is not None
            self.transport.close()
            return
        assert self._length is not None
        end = self._header_end + self._length
        if len(self._buffer) >= end:
            self._waiter = None
            waiter.set_result((self._status, bytes(self._buffer[self._header_end : end])))

    def _parse_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise ProtocolError("headers longer than 64 KiB")
            return False
        lines = bytes(self._buffer[:end]).split(b"\r\n")
        try:
            self._status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError) as exc:
            raise ProtocolError(f"bad status line {lines[0][:80]!r}") from exc
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                self._length = int(value.strip())
        if self._length is None:
            raise ProtocolError("answer without Content-Length")
        self._header_end = end + 4
        return True


class LeanClient:
    """POSTs to one ``http://host:port``, reusing idle connections and opening more as needed."""

    def __init__(self, base_url: str, *, max_connections: int = 256) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"the lean client speaks plain http://host:port only, got {base_url!r}")
        self._host, self._port = parts.hostname, parts.port or 80
        self._authority = parts.netloc
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)

    def build_post(self, target: str, body: bytes, content_type: str) -> bytes:
        """The request's bytes, built once and sent as often as needed."""
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {self._authority}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
        )
        return head.encode("latin-1") + body

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send prepared ``request`` bytes; ``(status, body)``."""
        async with self._slots:
            connection = await self._connection()
            try:
                answer = await connection.request(request)
            except BaseException:
                if connection.transport is not None:
                    connection.transport.close()
                raise
            if not connection.closed:
                self._idle.append(connection)
            return answer

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(_Connection, self._host, self._port)
        return connection

    def close(self) -> None:
        for connection in self._idle:
            if connection.transport is not None:
                connection.transport.close()
        self._idle.clear()

"""The connection-level limits the app cannot see, shared by both HTTP/1.1 parsers uvicorn offers.

- **Header timeout**: a connection must deliver a request's headers within ``header_timeout_s`` of
  opening (or of its previous response), else it gets 408 JSON and is closed: a client trickling
  headers byte by byte (slowloris) cannot hold a connection. An idle connection is closed quietly.
- **Header size**: a request line and headers longer than ``max_header_bytes`` get 431 JSON, and the
  connection closes; what a connection buffers of a request's head stays within that (plus one read).
- **Connection cap**: beyond ``max_connections`` open connections, a new one is answered 503 JSON with
  Retry-After and closed. (uvicorn's own ``limit_concurrency`` answers in plain text.)
- **JSON errors**: the server's own 400 for unparsable HTTP is ``{"error", "field"}`` JSON like every
  other error of the service.

Both parsers' protocols inherit `ConnectionLimits`: `service.http.h11_protocol` and
`service.http.httptools_protocol`; `service.http.protocols` picks one (``DETECT_HTTP_PARSER``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
from typing import Any

from starlette.types import Receive, Scope, Send


def json_body(message: str) -> bytes:
    return json.dumps({"error": message, "field": None}).encode()


def head_too_large_message(limit: int) -> str:
    return f"request line and headers exceed {limit} bytes (DETECT_MAX_HEADER_BYTES)"


async def over_capacity(scope: Scope, receive: Receive, send: Send) -> None:
    body = json_body("too many open connections; retry shortly")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ConnectionLimits(ABC):
    """The header timer and the connection cap, for a uvicorn HTTP protocol class to inherit first.

    The protocol says whether part of a request's head arrived (`head_started`), whether a request is
    underway (`request_underway`), and how it answers and closes (`send_and_close`)."""

    header_timeout_s: float = 10.0
    max_connections: int = 256
    max_header_bytes: int = 16 * 1024

    # Set by uvicorn's protocol classes.
    logger: logging.Logger
    client: tuple[str, int] | None
    connections: set[Any]
    app: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _header_timer: asyncio.TimerHandle | None = None  # armed while a request's headers are awaited

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._cap_connections()
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _cap_connections(self) -> None:
        """Called once the connection is counted: over the cap, its only request gets 503, then it closes."""
        if len(self.connections) > self.max_connections:
            self.logger.warning("connection from %s refused: %d open", self.client, len(self.connections))
            self.app = over_capacity

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.request_underway():
            return  # its response's completion re-arms the timer
        if self.head_started():
            self.send_and_close(
                408, json_body(f"request headers not received within {self.header_timeout_s:g}s")
            )
        else:  # an idle connection: close it quietly
            self.transport.close()

    @abstractmethod
    def head_started(self) -> bool:
        """Part of a request's head arrived, not all of its headers."""

    @abstractmethod
    def request_underway(self) -> bool:
        """A request's headers arrived and its exchange is not over (its body still arriving, or its
        response, or a pipelined one's, still being produced)."""

    @abstractmethod
    def send_and_close(self, status: int, body: bytes) -> None:
        """Answer ``status`` with the JSON ``body`` and close the connection."""

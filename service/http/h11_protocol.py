"""uvicorn's HTTP/1.1 protocol (h11) with the connection-level limits the app cannot see.

- **Header timeout**: a connection must deliver a request's headers within ``header_timeout_s`` of
  opening (or of its previous response), else it gets 408 JSON and is closed: a client trickling
  headers byte by byte (slowloris) cannot hold a connection.
- **Connection cap**: beyond ``max_connections`` open connections, a new one is answered 503 JSON with
  Retry-After and closed. (uvicorn's own ``limit_concurrency`` answers in plain text.)
- **JSON errors**: the server's own 400 for unparsable HTTP is ``{"error", "field"}`` JSON like every
  other error of the service.

Pass it as ``uvicorn.Config(http=protocol_class(settings))``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

from service.settings import Settings


def _json_body(message: str) -> bytes:
    return json.dumps({"error": message, "field": None}).encode()


async def _over_capacity(scope: Scope, receive: Receive, send: Send) -> None:
    body = _json_body("too many open connections; retry shortly")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class LimitedH11Protocol(H11Protocol):
    """`H11Protocol` plus a header timeout, a JSON connection cap and JSON 400s (see the module)."""

    header_timeout_s: float = 10.0
    max_connections: int = 256

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self.logger.warning(
                "connection from %s refused: %d open", get_remote_addr(transport), len(self.connections)
            )
            self.app = _over_capacity  # this connection's only request gets 503, then it closes
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the headers of the current request arrived
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()  # the next request's headers have the same time to arrive

    def send_400_response(self, msg: str) -> None:
        body = _json_body(f"malformed HTTP request: {msg}")
        self._send_and_close(400, body)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still being produced (pipelining): its completion re-arms
        if self.conn.trailing_data[0]:  # part of a request arrived, not all of its headers
            body = _json_body(f"request headers not received within {self.header_timeout_s:g}s")
            self._send_and_close(408, body)
        else:  # an idle connection: close it quietly
            self.transport.close()

    def _send_and_close(self, status: int, body: bytes) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers)) or b"")
            self.transport.write(self.conn.send(h11.Data(data=body)) or b"")
            self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError:  # h11 cannot send a response in this state: just close
            pass
        self.transport.close()


def protocol_class(settings: Settings) -> type[LimitedH11Protocol]:
    """A `LimitedH11Protocol` subclass carrying ``settings``' limits (uvicorn instantiates it itself)."""
    return type(
        "ConfiguredH11Protocol",
        (LimitedH11Protocol,),
        {"header_timeout_s": settings.header_timeout_s, "max_connections": settings.max_connections},
    )

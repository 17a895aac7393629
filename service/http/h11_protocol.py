"""uvicorn's pure-Python HTTP/1.1 protocol (h11) with the connection limits of
`service.http.connection_limits` (``DETECT_HTTP_PARSER=h11``).

h11 bounds what it buffers of an incomplete request head (``h11_max_incomplete_event_size``, set from
``DETECT_MAX_HEADER_BYTES``) but accepts a longer head that arrives whole, so each read that starts or
continues a head is checked first: the head, up to its blank line, within ``max_header_bytes``.
"""

from __future__ import annotations

import re

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.http.connection_limits import ConnectionLimits, head_too_large_message, json_body

# The blank line that ends a head (h11 also takes bare LF line endings).
HEAD_END = re.compile(rb"\n\r?\n")


class LimitedH11Protocol(ConnectionLimits, H11Protocol):
    """`H11Protocol` plus a header timeout, a JSON connection cap and JSON 400s and 431s."""

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self._head_over(data):
            self.send_and_close(431, json_body(head_too_large_message(self.max_header_bytes)))
            return
        super().data_received(data)

    def _head_over(self, data: bytes) -> bool:
        """The head being received, with ``data``, runs past ``max_header_bytes``."""
        window = self.conn.trailing_data[0] + data[: self.max_header_bytes + 4]
        end = HEAD_END.search(window)
        return (end.start() if end else len(window)) > self.max_header_bytes

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the headers of the current request arrived
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()  # the next request's headers have the same time to arrive

    def send_400_response(self, msg: str) -> None:
        if len(self.conn.trailing_data[0]) > self.max_header_bytes:  # h11: "Receive buffer too long"
            self.send_and_close(431, json_body(head_too_large_message(self.max_header_bytes)))
        else:
            self.send_and_close(400, json_body(f"malformed HTTP request: {msg}"))

    def head_started(self) -> bool:
        return self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])

    def request_underway(self) -> bool:
        if self.conn.their_state is not h11.IDLE:
            return True
        return self.cycle is not None and not self.cycle.response_complete

    def send_and_close(self, status: int, body: bytes) -> None:
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

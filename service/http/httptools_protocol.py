"""uvicorn's HTTP/1.1 protocol on httptools (llhttp, in C) with the connection limits of
`service.http.connection_limits` (``DETECT_HTTP_PARSER=httptools``, the default).

llhttp sets no bound on a request's head, so this protocol keeps one (``DETECT_MAX_HEADER_BYTES``): the
request line and headers as the parser hands them over, counted exactly; and, while a head is still
incomplete, the bytes received since it began, which bounds what the parser buffers of a header value
trickled in pieces (counted from the first read that begins inside the head, so a read that carries the
end of one request and the start of the next is never charged to the next one's head).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from service.http.connection_limits import ConnectionLimits, head_too_large_message, json_body

# Per header line, what the parser drops between name and value and at the end (": " and CRLF).
HEADER_LINE_OVERHEAD = 4


class HeadTooLarge(Exception):
    """Raised in a parser callback: the parser stops and uvicorn answers through `send_400_response`."""


class LimitedHttpToolsProtocol(ConnectionLimits, HttpToolsProtocol):
    """`HttpToolsProtocol` plus a header timeout, a header size limit, a JSON connection cap and JSON
    400s."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._in_head = False  # a request's head began and its headers are not all in
        self._head_size = 0  # its request line and headers so far, as the parser handed them over
        self._head_read = 0  # bytes read since the first read that began inside it
        self._head_over = False

    def data_received(self, data: bytes) -> None:
        inside = self._in_head
        super().data_received(data)
        if not (inside and self._in_head) or self.transport.is_closing():
            return
        self._head_read += len(data)
        if self._head_read > self.max_header_bytes:
            self._head_over = True
            self.send_400_response("request head too large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_size, self._head_read = True, 0, 0

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + HEADER_LINE_OVERHEAD)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_header_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()  # the next request's headers have the same time to arrive

    def send_400_response(self, msg: str) -> None:
        if self._head_over:
            self.send_and_close(431, json_body(head_too_large_message(self.max_header_bytes)))
        else:
            self.send_and_close(400, json_body(f"malformed HTTP request: {msg}"))

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.max_header_bytes:
            self._head_over = True
            raise HeadTooLarge  # the parser raises HttpParserCallbackError: uvicorn calls send_400_response

    def head_started(self) -> bool:
        return self._in_head

    def request_underway(self) -> bool:
        if self.cycle is None or self._in_head:
            return False
        return not self.cycle.response_complete or self.cycle.more_body

    def send_and_close(self, status: int, body: bytes) -> None:
        head = [
            STATUS_LINE[status],
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

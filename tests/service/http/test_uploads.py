"""Reading uploads: multipart parsing details, and noticing when the client disconnects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.errors import BadRequest
from service.http.uploads import disconnected, parse_multipart


def test_parse_multipart_keeps_names_filenames_and_bytes() -> None:
    body = (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="images"; filename="a.jpg"\r\n'
        b"Content-Type: image/jpeg\r\n\r\n"
        b"\xff\xd8first\r\n"
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="images"; filename="b.png"\r\n\r\n'
        b"second\r\n"
        b"--XyZ--\r\n"
    )
    parts = parse_multipart(body, "multipart/form-data; boundary=XyZ")
    assert [(p.label, p.filename, bytes(p.data)) for p in parts] == [
        ("images[0]", "a.jpg", b"\xff\xd8first"),
        ("images[1]", "b.png", b"second"),
    ]


def test_multipart_part_without_a_name_is_rejected() -> None:
    body = b"--B\r\nContent-Disposition: form-data\r\n\r\nx\r\n--B--\r\n"
    with pytest.raises(BadRequest, match="without a Content-Disposition name"):
        parse_multipart(body, "multipart/form-data; boundary=B")


class FakeRequest:
    """The one thing `disconnected` uses: ``receive()``, delivering ``messages`` in order."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = list(messages)

    async def receive(self) -> dict[str, Any]:
        return self.messages.pop(0)


def test_disconnected_returns_at_the_disconnect_message() -> None:
    request = FakeRequest({"type": "http.request", "body": b""}, {"type": "http.disconnect"})
    asyncio.run(disconnected(request)())  # type: ignore[arg-type]
    assert request.messages == []

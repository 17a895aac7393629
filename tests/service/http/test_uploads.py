"""Reading uploads: multipart parsing details, and cancelling work when the client disconnects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.errors import BadRequest
from service.http.uploads import ClientClosedRequest, cancel_on_disconnect, parse_multipart


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


class FakeDisconnectingRequest:
    """The one thing `cancel_on_disconnect` uses: ``receive()``, here delivering a disconnect on cue."""

    def __init__(self) -> None:
        self.disconnect = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.disconnect.wait()
        return {"type": "http.disconnect"}


def test_work_is_cancelled_when_the_client_disconnects() -> None:
    async def scenario() -> None:
        request = FakeDisconnectingRequest()
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def work() -> str:
            started.set()
            try:
                await asyncio.Event().wait()  # e.g. waiting for a batch
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "never"

        task = asyncio.ensure_future(cancel_on_disconnect(request, work()))  # type: ignore[arg-type]
        await started.wait()
        request.disconnect.set()
        with pytest.raises(ClientClosedRequest):
            await task
        assert cancelled.is_set()

    asyncio.run(scenario())


def test_finished_work_returns_its_result() -> None:
    async def scenario() -> None:
        async def work() -> str:
            return "done"

        assert await cancel_on_disconnect(FakeDisconnectingRequest(), work()) == "done"  # type: ignore[arg-type]

    asyncio.run(scenario())

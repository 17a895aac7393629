"""`bench.load.lean_http.LeanClient`: keep-alive POSTs against a loopback server the test runs, answers
split across reads, and clear failures for what it does not speak."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from bench.load.lean_http import LeanClient, ProtocolError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _with_server(handler: Handler, use: Callable[[str], Awaitable[object]]) -> object:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await asyncio.wait_for(use(f"http://127.0.0.1:{port}"), 5)
    finally:
        server.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length"))
    return head, await reader.readexactly(length)


def test_keep_alive_posts_and_answers_split_across_reads() -> None:
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head, body = await _read_request(reader)
                answer = b'{"echo": %d}' % len(body)
                status = b"201 Created" if b"POST /detect?model=m " in head else b"400 Bad Request"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n\r\n" % len(answer))
                await writer.drain()
                await asyncio.sleep(0.01)  # the body in a later read than the head
                writer.write(answer)
                await writer.drain()
        except asyncio.IncompleteReadError:
            writer.close()

    async def use(url: str) -> list[tuple[int, bytes]]:
        client = LeanClient(url)
        request = client.build_post("/detect?model=m", b"x" * 1000, "image/jpeg")
        answers = [await client.send(request) for _ in range(3)]
        client.close()
        return answers

    answers = asyncio.run(_with_server(handler, use))
    assert answers == [(201, b'{"echo": 1000}')] * 3
    assert len(connections) == 1  # one connection, reused


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ProtocolError, "Content-Length"),
        (b"garbage\r\n\r\n", ProtocolError, "status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", ConnectionError, "closed mid-answer"),
    ],
    ids=["chunked", "no-status", "cut-short"],
)
def test_answers_it_cannot_read_fail_clearly(answer: bytes, error: type[Exception], match: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def use(url: str) -> object:
        client = LeanClient(url)
        return await client.send(client.build_post("/detect", b"x", "image/jpeg"))

    with pytest.raises(error, match=match):
        asyncio.run(_with_server(handler, use))


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="plain http"):
        LeanClient("https://127.0.0.1:1")

"""Read the images of a detect request: multipart files, or one image as the raw body.

- ``multipart/form-data``: file parts named ``images`` (repeatable), ``image`` or ``file``;
- a raw body with ``Content-Type: image/*`` or ``application/octet-stream``: one image.

The body size limit is enforced while the body streams in (a declared Content-Length over the limit is
rejected before reading anything). The whole body is then in memory, bounded by that limit, and parsed
without temporary files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from service.errors import BadRequest, PayloadTooLarge, ServiceError, UnsupportedMediaType

IMAGE_FIELDS = ("images", "image", "file")
RAW_MEDIA_TYPES = ("application/octet-stream",)  # plus any image/*

T = TypeVar("T")


class ClientClosedRequest(ServiceError):
    """The client went away before the response was ready (nginx's 499; nobody receives it)."""

    status_code = 499


@dataclass(frozen=True)
class ImageUpload:
    """One image's bytes; ``label`` is how errors name it (``images[1]``, ``body``)."""

    label: str
    data: bytes
    filename: str | None = None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or `PayloadTooLarge` as soon as it exceeds ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}", field="body")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes", field="body")
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise ClientClosedRequest("client disconnected while sending the body") from exc
    return b"".join(chunks)


@dataclass
class _Part:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)
    name: str = ""
    filename: str | None = None


def parse_multipart(body: bytes, content_type: str) -> list[_Part]:
    """Split a multipart/form-data body into parts. Raises `BadRequest` for a malformed body."""
    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise BadRequest("multipart Content-Type without a boundary parameter", field="body")
    parts: list[_Part] = []
    header_name = bytearray()
    header_value = bytearray()

    def on_part_begin() -> None:
        parts.append(_Part())

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header_name.extend(data[start:end])

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header_value.extend(data[start:end])

    def on_header_end() -> None:
        parts[-1].headers.append((bytes(header_name).lower(), bytes(header_value)))
        header_name.clear()
        header_value.clear()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        parts[-1].data.extend(data[start:end])

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_part_data": on_part_data,
        },
    )
    try:
        parser.write(body)
        parser.finalize()
    except FormParserError as exc:
        raise BadRequest(f"malformed multipart body: {exc}", field="body") from exc
    for part in parts:
        disposition = dict(part.headers).get(b"content-disposition", b"")
        _, params = parse_options_header(disposition)
        if b"name" not in params:
            raise BadRequest("multipart part without a Content-Disposition name", field="body")
        part.name = params[b"name"].decode("utf-8", "replace")
        if b"filename" in params:
            part.filename = params[b"filename"].decode("utf-8", "replace")
    return parts


async def read_uploads(request: Request, *, max_body_bytes: int, max_images: int) -> list[ImageUpload]:
    """The request's images, in order. Raises `UnsupportedMediaType`, `PayloadTooLarge` or `BadRequest`."""
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "multipart/form-data":
        parts = parse_multipart(await read_body(request, max_body_bytes), content_type)
        unexpected = [p.name for p in parts if p.name not in IMAGE_FIELDS]
        if unexpected:
            raise BadRequest(
                f"unexpected multipart field {unexpected[0]!r}; send image files in field 'images' "
                "(or 'image' / 'file'); parameters go in the query string",
                field=unexpected[0],
            )
        if not parts:
            raise BadRequest("multipart body holds no image; send files in field 'images'", field="images")
        if len(parts) > max_images:
            raise BadRequest(f"{len(parts)} images in one request; the limit is {max_images}", field="images")
        return [
            ImageUpload(label=f"{p.name}[{i}]", data=bytes(p.data), filename=p.filename)
            for i, p in enumerate(parts)
        ]
    if media_type.startswith("image/") or media_type in RAW_MEDIA_TYPES:
        return [ImageUpload(label="body", data=await read_body(request, max_body_bytes))]
    received = f"Content-Type {media_type!r}" if media_type else "no Content-Type"
    raise UnsupportedMediaType(
        f"got {received}; send multipart/form-data with files in field 'images', or one image as the body "
        "with Content-Type image/jpeg, image/png or application/octet-stream",
        field="content-type",
    )


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it if the client disconnects first (then raise `ClientClosedRequest`).

    Call only after the body was read: the next ASGI message is then the disconnect. Cancelling the
    work removes its queued images from their batch before any compute is spent on them.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ClientClosedRequest("client disconnected before the response was ready")
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass

"""Read request bodies: the images of a detect request (`read_uploads`), or a whole body (`read_body`).

Images come as

- ``multipart/form-data``: file parts named ``images`` (repeatable), ``image`` or ``file``;
- a raw body with ``Content-Type: image/*`` or ``application/octet-stream``: one image;
- a raw body with ``Content-Type: video/*``: one video file (up to its own size limit, `BodyReader.images`).

The body is read message by message with an idle and a total timeout (408), its size is limited while
it streams (413; a declared Content-Length over the limit is refused before reading anything), and its
bytes are held in the process-wide body budget from before they arrive until the reader's block ends
(503 when that is full). A multipart body is parsed as it streams, with caps on the number of parts and
on each part's headers, so a body of many tiny parts fails at the first part too many instead of being
parsed whole. Only the image bytes are kept (one copy, no temporary files).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from dataclasses import dataclass, field, replace

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from service.errors import (
    BadRequest,
    ClientClosedRequest,
    PayloadTooLarge,
    RequestTimeout,
    ServiceUnavailable,
    UnsupportedMediaType,
)
from service.pipeline.inputs import ImageUpload
from service.pipeline.tasks import Gone
from service.runtime.admission import UploadLimits
from service.runtime.budget import MemoryBudget

IMAGE_FIELDS = ("images", "image", "file")
RAW_MEDIA_TYPES = ("application/octet-stream",)  # plus any image/*
# Headers of one multipart part (Content-Disposition, Content-Type): a few hundred bytes in practice.
MAX_PART_HEADER_BYTES = 4096


async def body_chunks(
    request: Request, limits: UploadLimits, closing: asyncio.Event
) -> AsyncGenerator[bytes, None]:
    """The body's chunks as they arrive. Raises `RequestTimeout` (408) when the body stalls for
    ``idle_timeout_s`` or is still arriving after ``total_timeout_s``, `PayloadTooLarge` past
    ``max_body_bytes``, `ClientClosedRequest` on disconnect and `ServiceUnavailable` when the server
    closes (``closing`` set: a stalled upload must not hold the shutdown)."""
    deadline = time.monotonic() + limits.total_timeout_s
    size = 0
    closed = asyncio.ensure_future(closing.wait())
    try:
        while True:
            remaining = deadline - time.monotonic()
            receive = asyncio.ensure_future(request.receive())
            done, _ = await asyncio.wait(
                {receive, closed},
                timeout=max(0.0, min(limits.idle_timeout_s, remaining)),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if receive not in done:
                receive.cancel()
                if closed in done:
                    raise ServiceUnavailable(
                        "server shut down while the body was being received", retry_after_s=1
                    )
                if remaining <= limits.idle_timeout_s:
                    raise RequestTimeout(
                        f"request body not received within {limits.total_timeout_s:g}s", field="body"
                    )
                raise RequestTimeout(
                    f"request body stalled: nothing received for {limits.idle_timeout_s:g}s "
                    f"({size} bytes so far)",
                    field="body",
                )
            message = receive.result()
            if message["type"] == "http.disconnect":
                raise ClientClosedRequest("client disconnected while sending the body")
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise PayloadTooLarge(
                    f"request body exceeds the limit of {limits.max_body_bytes} bytes", field="body"
                )
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return
    finally:
        closed.cancel()


@dataclass
class _Part:
    name: str = ""
    filename: str | None = None
    header_bytes: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)


class MultipartImages:
    """Streaming multipart/form-data parser that keeps only image parts, within caps.

    Raises `BadRequest` at the first part too many, an oversized part header, a part without a name or
    with a field other than `IMAGE_FIELDS`, or a malformed body.
    """

    def __init__(self, content_type: str, max_images: int):
        _, options = parse_options_header(content_type)
        boundary = options.get(b"boundary")
        if not boundary:
            raise BadRequest("multipart Content-Type without a boundary parameter", field="body")
        self.max_images = max_images
        self.parts: list[_Part] = []
        self._name = bytearray()
        self._value = bytearray()
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._on_part_begin,
                "on_header_field": self._on_header_field,
                "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
                "on_headers_finished": self._on_headers_finished,
                "on_part_data": self._on_part_data,
            },
        )

    def write(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except FormParserError as exc:
            raise BadRequest(f"malformed multipart body: {exc}", field="body") from exc

    def finish(self) -> list[ImageUpload]:
        try:
            self._parser.finalize()
        except FormParserError as exc:
            raise BadRequest(f"malformed multipart body: {exc}", field="body") from exc
        if not self.parts:
            raise BadRequest("multipart body holds no image; send files in field 'images'", field="images")
        return [
            ImageUpload(label=f"{p.name}[{i}]", data=p.data, filename=p.filename)
            for i, p in enumerate(self.parts)
        ]

    def _on_part_begin(self) -> None:
        if len(self.parts) >= self.max_images:
            raise BadRequest(
                f"more than {self.max_images} images in one request; the limit is {self.max_images}",
                field="images",
            )
        self.parts.append(_Part())

    def _header_bytes(self, n: int) -> None:
        part = self.parts[-1]
        part.header_bytes += n
        if part.header_bytes > MAX_PART_HEADER_BYTES:
            raise BadRequest(
                f"multipart part {len(self.parts) - 1} has over {MAX_PART_HEADER_BYTES} bytes of headers",
                field="body",
            )

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_bytes(end - start)
        self._name.extend(data[start:end])

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_bytes(end - start)
        self._value.extend(data[start:end])

    def _on_header_end(self) -> None:
        self.parts[-1].headers.append((bytes(self._name).lower(), bytes(self._value)))
        self._name.clear()
        self._value.clear()

    def _on_headers_finished(self) -> None:
        part = self.parts[-1]
        disposition = dict(part.headers).get(b"content-disposition", b"")
        _, params = parse_options_header(disposition)
        if b"name" not in params:
            raise BadRequest("multipart part without a Content-Disposition name", field="body")
        part.name = params[b"name"].decode("utf-8", "replace")
        if part.name not in IMAGE_FIELDS:
            raise BadRequest(
                f"unexpected multipart field {part.name!r}; send image files in field 'images' "
                "(or 'image' / 'file'); parameters go in the query string",
                field=part.name,
            )
        if b"filename" in params:
            part.filename = params[b"filename"].decode("utf-8", "replace")
        part.headers.clear()

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        self.parts[-1].data.extend(data[start:end])


def parse_multipart(body: bytes, content_type: str, max_images: int = 1 << 30) -> list[ImageUpload]:
    """Split a whole multipart/form-data body into its image parts (see `MultipartImages`)."""
    parser = MultipartImages(content_type, max_images)
    parser.write(body)
    return parser.finish()


def _media_type(request: Request) -> str:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if (
        media_type == "multipart/form-data"
        or media_type.startswith(("image/", "video/"))
        or media_type in RAW_MEDIA_TYPES
    ):
        return media_type
    received = f"Content-Type {media_type!r}" if media_type else "no Content-Type"
    raise UnsupportedMediaType(
        f"got {received}; send multipart/form-data with files in field 'images', or one image as the body "
        "with Content-Type image/jpeg, image/png or application/octet-stream, or one video as the body "
        "with Content-Type video/mp4, video/quicktime, video/x-matroska or video/webm",
        field="content-type",
    )


def _declared_length(request: Request, limit: int) -> int | None:
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit():
        return None
    if int(declared) > limit:
        raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}", field="body")
    return int(declared)


def _body_hold(
    request: Request, limits: UploadLimits, budget: MemoryBudget
) -> AbstractAsyncContextManager[None]:
    declared = _declared_length(request, limits.max_body_bytes)
    # Without a Content-Length (chunked) the body may be as large as the limit: hold that.
    reserved = limits.max_body_bytes if declared is None else max(declared, 1)
    return budget.hold(reserved, limits.budget_wait_s, field="body")


@asynccontextmanager
async def read_uploads(
    request: Request, limits: UploadLimits, budget: MemoryBudget, closing: asyncio.Event
) -> AsyncIterator[list[ImageUpload]]:
    """``async with``: the request's images, in order, their bytes held in ``budget`` for the block.

    Raises `UnsupportedMediaType`, `PayloadTooLarge`, `BadRequest`, `RequestTimeout` or
    `ServiceUnavailable` (budget full, or shutting down).
    """
    media_type = _media_type(request)
    async with _body_hold(request, limits, budget):
        async with aclosing(body_chunks(request, limits, closing)) as chunks:
            if media_type == "multipart/form-data":
                parser = MultipartImages(request.headers["content-type"], limits.max_images)
                async for chunk in chunks:
                    parser.write(chunk)
                images = parser.finish()
            else:
                data = bytearray()
                async for chunk in chunks:
                    data.extend(chunk)
                images = [ImageUpload(label="body", data=data)]
        yield images


@asynccontextmanager
async def read_body(
    request: Request, limits: UploadLimits, budget: MemoryBudget, closing: asyncio.Event
) -> AsyncIterator[bytearray]:
    """``async with``: the whole body, whatever its Content-Type, held in ``budget`` for the block
    (errors as `read_uploads`)."""
    async with _body_hold(request, limits, budget):
        data = bytearray()
        async with aclosing(body_chunks(request, limits, closing)) as chunks:
            async for chunk in chunks:
                data.extend(chunk)
        yield data


@dataclass(frozen=True)
class BodyReader:
    """Reads request bodies within the upload limits and the body memory budget, until the server closes."""

    limits: UploadLimits
    budget: MemoryBudget
    closing: asyncio.Event

    def images(
        self, request: Request, video_max_bytes: int | None = None
    ) -> AbstractAsyncContextManager[list[ImageUpload]]:
        """The request's images, or its one video (see `read_uploads`); a raw ``video/*`` body may be up
        to ``video_max_bytes`` (default: the body limit)."""
        limits = self.limits
        if video_max_bytes is not None and is_video_body(request):
            limits = replace(limits, max_body_bytes=video_max_bytes)
        return read_uploads(request, limits, self.budget, self.closing)

    def raw(self, request: Request) -> AbstractAsyncContextManager[bytearray]:
        """The request's whole body (see `read_body`)."""
        return read_body(request, self.limits, self.budget, self.closing)


def is_video_body(request: Request) -> bool:
    """Whether the body is declared a video file (``Content-Type: video/*``)."""
    return request.headers.get("content-type", "").strip().lower().startswith("video/")


def disconnected(request: Request) -> Gone:
    """What returns once the client has disconnected. Await it only after the body was read: the next
    ASGI message is then the disconnect."""

    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return wait

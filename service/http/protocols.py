"""The HTTP/1.1 protocol uvicorn runs, as ``DETECT_HTTP_PARSER`` says: ``httptools`` (default; llhttp, in C:
`service.http.httptools_protocol`) or ``h11`` (pure Python: `service.http.h11_protocol`). Both keep the
connection limits of `service.http.connection_limits` and answer alike; httptools spends less of the event
loop's time per request (docs/benchmarks/request-path.md, "The HTTP parser").

Pass ``uvicorn.Config(http=protocol_class(settings), **config_options(settings))``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from service.http.h11_protocol import LimitedH11Protocol
from service.http.httptools_protocol import LimitedHttpToolsProtocol
from service.settings import Settings


def protocol_class(settings: Settings) -> type[asyncio.Protocol]:
    """The ``DETECT_HTTP_PARSER`` protocol class, carrying ``settings``' limits (uvicorn instantiates it)."""
    base: type[asyncio.Protocol] = (
        LimitedH11Protocol if settings.http_parser == "h11" else LimitedHttpToolsProtocol
    )
    limits = {
        "header_timeout_s": settings.header_timeout_s,
        "max_connections": settings.max_connections,
        "max_header_bytes": settings.max_header_bytes,
    }
    return type(f"Configured{base.__name__}", (base,), limits)


def config_options(settings: Settings) -> dict[str, Any]:
    """The `uvicorn.Config` options that go with `protocol_class` (h11 bounds its buffer itself)."""
    return {"h11_max_incomplete_event_size": settings.max_header_bytes}

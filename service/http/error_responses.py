"""The one place that maps errors to HTTP responses.

Every error response body is ``{"error": "<what was wrong>", "field": "<which input>" | null}``; a
domain error (`service.errors`) answers with its status code, plus ``Retry-After`` when it has one.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.errors import RequestTimeout, ServiceError, Unauthorized

logger = logging.getLogger(__name__)


def error_response(exc: ServiceError) -> JSONResponse:
    """The HTTP response for a domain error (also used by middleware, outside the exception handlers)."""
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="detect"'
    if isinstance(exc, RequestTimeout):
        headers["Connection"] = "close"  # the rest of the body may still be on its way
    if exc.retry_after_s is not None:
        # Retry-After takes whole seconds; round up so clients never retry too early.
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return JSONResponse(
        {"error": exc.message, "field": exc.field}, status_code=exc.status_code, headers=headers
    )


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    if exc.status_code >= 500:
        logger.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status_code, exc.message)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors: list[dict[str, Any]] = list(exc.errors())
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    # loc is e.g. ("query", "score_threshold"); the first element only says where the value came from.
    loc = [str(part) for part in first.get("loc", ())]
    field = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else None)
    message = f"{field}: {first.get('msg', 'invalid value')}" if field else str(first.get("msg"))
    if "input" in first and not isinstance(first["input"], dict):
        message += f" (got {first['input']!r})"
    return JSONResponse({"error": message, "field": field}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(
        {"error": str(exc.detail), "field": None}, status_code=exc.status_code, headers=exc.headers
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": f"internal error: {type(exc).__name__}", "field": None}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Route every error the app can raise through the single JSON error shape."""
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)

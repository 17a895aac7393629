"""The one place that maps errors to gRPC status codes (as `service.http.error_responses` does to HTTP).

A domain error (`service.errors`) ends the call with the code its HTTP status stands for and the same
message text; ``retry-after`` (whole seconds) and ``error-field`` go in the trailing metadata. Anything
else is INTERNAL, logged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from service.errors import ServiceError

logger = logging.getLogger(__name__)

R = TypeVar("R")

# HTTP status of a domain error -> gRPC status code. 413 (too large for the limits) is INVALID_ARGUMENT, not
# RESOURCE_EXHAUSTED: retrying the same request cannot succeed, and clients retry RESOURCE_EXHAUSTED.
GRPC_CODES: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    406: grpc.StatusCode.INVALID_ARGUMENT,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def grpc_code(exc: BaseException) -> grpc.StatusCode:
    """The status code a call that raised ``exc`` ends with."""
    if isinstance(exc, ServiceError):
        return GRPC_CODES.get(exc.status_code, grpc.StatusCode.INTERNAL)
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.INTERNAL


def trailing_metadata(exc: ServiceError) -> tuple[tuple[str, str], ...]:
    metadata: list[tuple[str, str]] = []
    if exc.retry_after_s is not None:
        metadata.append(("retry-after", str(max(1, math.ceil(exc.retry_after_s)))))
    if exc.field is not None:
        metadata.append(("error-field", exc.field))
    return tuple(metadata)


async def abort(context: grpc.aio.ServicerContext, exc: ServiceError) -> None:
    """End the call with ``exc``'s code, message and metadata (raises grpc's AbortError)."""
    await context.abort(grpc_code(exc), exc.message, trailing_metadata=trailing_metadata(exc))


def mapped(
    method: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]:
    """Wrap an RPC method so its domain errors end the call through this module's mapping."""

    @functools.wraps(method)
    async def call(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except ServiceError as exc:
            if exc.status_code >= 500:
                logger.warning("gRPC %s -> %s: %s", method.__name__, grpc_code(exc).name, exc.message)
            await abort(context, exc)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            logger.exception("unhandled error in gRPC %s", method.__name__, exc_info=exc)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    return call

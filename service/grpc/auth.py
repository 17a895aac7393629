"""API keys on the gRPC port: request metadata ``authorization: Bearer <key>`` or ``x-api-key: <key>``,
checked against the same keys as the HTTP API (`service.http.auth`).

Probes stay open as on HTTP: the protocol's ServerLive and ServerReady, and the gRPC health protocol.
A call without a valid key ends UNAUTHENTICATED with the HTTP API's message, before its handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from service.grpc.status import abort
from service.http.auth import ApiKeys, missing_key_error, presented_key

INFERENCE_SERVICE = "inference.GRPCInferenceService"
OPEN_METHODS = frozenset(
    {
        f"/{INFERENCE_SERVICE}/ServerLive",
        f"/{INFERENCE_SERVICE}/ServerReady",
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
    }
)


def metadata_key(metadata: Any) -> str | None:
    """The key a call presents in its metadata (the same rule as HTTP headers)."""
    headers = {
        key.lower().encode("latin-1"): value.encode("latin-1")
        for key, value in (metadata or ())
        if isinstance(value, str)
    }
    return presented_key(headers)


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call but the probes without a valid key."""

    def __init__(self, keys: list[str]):
        self._keys = ApiKeys(keys)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        key = metadata_key(details.invocation_metadata)
        if details.method in OPEN_METHODS or self._keys.accepts(key):
            return await continuation(details)
        error = missing_key_error(key)

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
            await abort(context, error)

        return grpc.unary_unary_rpc_method_handler(refuse)

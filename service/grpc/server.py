"""The gRPC server: the Open Inference Protocol's ``inference.GRPCInferenceService`` and the gRPC health
protocol (``grpc.health.v1.Health``) on ``grpc_port``, in the HTTP app's event loop and lifespan.

Messages are limited to ``max_body_bytes``, as HTTP bodies are. Health answers SERVING for the server
(service ``""``) and for ``inference.GRPCInferenceService`` while the server is ready (`server_ready`), and
for each loaded model name while it is ready; NOT_SERVING otherwise, and for good once the drain began.
`GrpcServer.stop` lets calls in flight finish (up to a grace period) before closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from service.grpc.auth import INFERENCE_SERVICE, ApiKeyInterceptor
from service.grpc.servicer import METHODS, InferenceServicer, ServingState, server_ready

logger = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
HEALTH_REFRESH_S = 0.5  # how soon Watch streams see a readiness change


class ReadinessHealth(health.aio.HealthServicer):  # type: ignore[misc]
    """The health servicer, its statuses refreshed from readiness on each Check and every half second."""

    def __init__(self, state: ServingState):
        super().__init__()
        self._state = state

    async def refresh(self) -> None:
        if self._state.lifecycle.draining:
            await self.enter_graceful_shutdown()
            return
        ready = SERVING if server_ready(self._state) else NOT_SERVING
        await self.set("", ready)
        await self.set(INFERENCE_SERVICE, ready)
        for name, versions in list(self._state.runtime.models.items()):
            models = list(versions.values())
            await self.set(name, SERVING if models and all(m.ready for m in models) else NOT_SERVING)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> object:
        await self.refresh()
        return await super().Check(request, context)


def _generic_handler(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
        for name, (request, response) in METHODS.items()
    }
    return grpc.method_handlers_generic_handler(INFERENCE_SERVICE, handlers)


class GrpcServer:
    """Owns the grpc.aio server and the health refresh task: `start`, then `stop` on shutdown."""

    def __init__(self, state: ServingState, api_keys: list[str]):
        settings = state.settings
        options = [
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.max_send_message_length", -1),
        ]
        interceptors = [ApiKeyInterceptor(api_keys)] if api_keys else []
        self._server = grpc.aio.server(interceptors=interceptors, options=options)
        self._server.add_generic_rpc_handlers((_generic_handler(InferenceServicer(state)),))
        self.health = ReadinessHealth(state)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        self._address = f"{settings.host}:{settings.grpc_port}"
        self._refresher: asyncio.Task[None] | None = None
        self.port: int | None = None

    async def start(self) -> None:
        self.port = self._server.add_insecure_port(self._address)
        await self._server.start()
        host = self._address.rpartition(":")[0]
        logger.info("gRPC server (Open Inference Protocol, health) listening on %s:%d", host, self.port)
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_health())

    async def _refresh_health(self) -> None:
        while True:
            try:
                await self.health.refresh()
            except Exception:  # a failed refresh must not end the task that keeps Watch current
                logger.exception("gRPC health refresh failed")
            await asyncio.sleep(HEALTH_REFRESH_S)

    async def stop(self, grace_s: float) -> None:
        """NOT_SERVING at once, no new calls, calls in flight get ``grace_s`` to finish."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        await self.health.enter_graceful_shutdown()
        await self._server.stop(grace_s)

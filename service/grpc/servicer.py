"""The Open Inference Protocol's ``GRPCInferenceService``: the REST protocol's answers (`service.v2`) as
gRPC calls, through the same pipeline entry, limits, metrics and model leases.

Readiness calls answer ``ready: false`` (never an error) for a model that is unknown or not ready, as
Triton does. Repository calls need ``repository_api`` (else UNIMPLEMENTED) and, like every call but the
probes, an API key when keys are configured (`service.grpc.auth`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeAlias

import grpc
from google.protobuf import json_format
from opentelemetry.trace import Span

from service.errors import BadRequest, ServiceError
from service.grpc.proto import oip_pb2 as pb
from service.grpc.status import grpc_code, mapped
from service.grpc.tensors import decode_grpc_request, encode_grpc_response
from service.http.lifecycle import Lifecycle
from service.pipeline.entry import DetectionPipeline
from service.runtime import tracing
from service.runtime.loaded_model import LoadedModel
from service.runtime.metrics import NO_MODEL, ServiceMetrics
from service.runtime.model_control import ModelControl
from service.runtime.model_runtime import ModelRuntime
from service.runtime.repository import version_sort_key
from service.settings import Settings
from service.v2.infer import infer_decoded
from service.v2.routes import EXTENSIONS
from service.v2.signature import model_config, model_metadata

Context: TypeAlias = grpc.aio.ServicerContext


@dataclass(frozen=True)
class ServingState:
    """What the servicer answers from: the same objects the HTTP app holds."""

    settings: Settings
    runtime: ModelRuntime
    control: ModelControl
    pipeline: DetectionPipeline
    lifecycle: Lifecycle
    metrics: ServiceMetrics
    version: str


class InferenceServicer:
    """One method per RPC (the protocol's names); `service.grpc.server` registers them."""

    def __init__(self, state: ServingState):
        self.state = state

    def _model(self, name: str, version: str) -> LoadedModel:
        return self.state.runtime.get(name, version or None)

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=server_ready(self.state))

    @mapped
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        repository = ["model_repository"] if self.state.settings.repository_api else []
        return pb.ServerMetadataResponse(
            name="detect", version=self.state.version, extensions=[*EXTENSIONS, *repository]
        )

    @mapped
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        try:
            model = self._model(request.name, request.version)
        except ServiceError:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=model.ready)

    @mapped
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        model = self._model(request.name, request.version)
        versions = sorted(self.state.runtime.models.get(model.name, {}), key=version_sort_key)
        response = pb.ModelMetadataResponse()
        json_format.ParseDict(model_metadata(model, versions).model_dump(), response)
        return response

    @mapped
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        config = json_format.ParseDict(
            model_config(self._model(request.name, request.version)), pb.ModelConfig()
        )
        return pb.ModelConfigResponse(config=config)

    @mapped
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        started = time.monotonic()
        label = NO_MODEL
        code = grpc.StatusCode.OK
        span = _request_span(context)
        token = tracing.REQUEST_SPAN.set(span) if span is not None else None
        try:
            model = self.state.runtime.get(request.model_name, request.model_version or None, canary=True)
            label = model.name
            with model.lease():
                return await self._infer(model, request, started)
        except BaseException as exc:
            code = grpc_code(exc)
            raise
        finally:
            self.state.metrics.observe_grpc_request(label, code.name, time.monotonic() - started)
            if token is not None:
                tracing.REQUEST_SPAN.reset(token)
                tracing.end_rpc_span(span, label, code.name, code.value[0])

    async def _infer(
        self, model: LoadedModel, request: pb.ModelInferRequest, started: float
    ) -> pb.ModelInferResponse:
        settings, resources = self.state.settings, self.state.pipeline.resources
        size = request.ByteSize()
        async with self.state.pipeline.admit(model, started) as run:
            # The message is already in memory: count it against the body budget until inference is done.
            await run.hold_input(resources.body_budget.hold(size, resources.budget_wait_s, field="body"))
            spec, outputs = model.manifest.input, model.manifest.outputs
            decoded = await run.compute(
                decode_grpc_request, request, spec, outputs, settings.max_images_per_request, nbytes=size
            )
            batched = await infer_decoded(run, decoded, settings)
            return await run.compute(
                encode_grpc_response, model.name, model.version, decoded.request_id, batched, decoded.outputs
            )

    @mapped
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        await self._repository_api(context)
        rows = await self.state.control.index(ready_only=request.ready)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=row.name, version=row.version, state=row.state, reason=row.reason
                )
                for row in rows
            ]
        )

    @mapped
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        await self._repository_api(context)
        if request.parameters:
            raise BadRequest(
                f"load parameters are not supported (got {sorted(request.parameters)}); put the model's "
                "files in the repository folder and load it by name",
                field="parameters",
            )
        await self.state.control.load(request.model_name)
        return pb.RepositoryModelLoadResponse()

    @mapped
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        await self._repository_api(context)
        await self.state.control.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    async def _repository_api(self, context: Context) -> None:
        if not self.state.settings.repository_api:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "the model repository extension is off on this server (DETECT_REPOSITORY_API=false)",
            )


def server_ready(state: ServingState) -> bool:
    """Every loaded model serves and the server is not draining (the REST readiness rule)."""
    return state.runtime.ready and not state.lifecycle.draining


# RPC name -> (request message, response message): what `service.grpc.server` registers.
METHODS: dict[str, tuple[type[Any], type[Any]]] = {
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelConfig": (pb.ModelConfigRequest, pb.ModelConfigResponse),
    "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
    "RepositoryIndex": (pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
    "RepositoryModelLoad": (pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse),
    "RepositoryModelUnload": (pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse),
}


def _request_span(context: Context) -> Span | None:
    """The call's trace span when tracing is on, continuing the ``traceparent`` of its metadata."""
    traces = tracing.current()
    if not traces.enabled:
        return None
    metadata = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
    attributes = {
        "rpc.system": "grpc",
        "rpc.service": "inference.GRPCInferenceService",
        "rpc.method": "ModelInfer",
    }
    return traces.request_span("inference.GRPCInferenceService/ModelInfer", metadata, attributes)

"""FastAPI dependencies as `Annotated` aliases, so route functions stay a few lines.

Every dependency is ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread
round trip (two event-loop wake-ups) per dependency per request for what is an attribute read
(tests/service/http/test_deps.py keeps it so)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request

from service.capture.recorder import SampleCapture
from service.http.lifecycle import Lifecycle
from service.http.uploads import BodyReader
from service.pipeline.entry import DetectionPipeline
from service.runtime.admission import Resources
from service.runtime.loaded_model import LoadedModel
from service.runtime.metrics import ServiceMetrics
from service.runtime.model_control import ModelControl
from service.runtime.model_runtime import ModelRuntime
from service.schemas import DetectQuery
from service.settings import Settings
from service.streams.manager import StreamManager


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_runtime(request: Request) -> ModelRuntime:
    runtime: ModelRuntime = request.app.state.runtime
    return runtime


async def get_metrics(request: Request) -> ServiceMetrics:
    metrics: ServiceMetrics = request.app.state.metrics
    return metrics


async def get_lifecycle(request: Request) -> Lifecycle:
    lifecycle: Lifecycle = request.app.state.lifecycle
    return lifecycle


async def get_resources(request: Request) -> Resources:
    """Memory budgets and the image-work scheduler (created in the lifespan)."""
    resources: Resources = request.app.state.resources
    return resources


async def get_pipeline(request: Request) -> DetectionPipeline:
    """The one way into inference, for every protocol (created in the lifespan)."""
    pipeline: DetectionPipeline = request.app.state.pipeline
    return pipeline


SettingsDep = Annotated[Settings, Depends(get_settings)]
RuntimeDep = Annotated[ModelRuntime, Depends(get_runtime)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
LifecycleDep = Annotated[Lifecycle, Depends(get_lifecycle)]
ResourcesDep = Annotated[Resources, Depends(get_resources)]
PipelineDep = Annotated[DetectionPipeline, Depends(get_pipeline)]


async def get_body_reader(resources: ResourcesDep, lifecycle: LifecycleDep) -> BodyReader:
    """Reads request bodies within the upload limits and the body budget; gives up when the server closes."""
    return BodyReader(resources.upload_limits, resources.body_budget, lifecycle.closing)


BodyReaderDep = Annotated[BodyReader, Depends(get_body_reader)]
DetectQueryDep = Annotated[DetectQuery, Query()]


async def get_model(
    request: Request, query: DetectQueryDep, runtime: RuntimeDep
) -> AsyncIterator[LoadedModel]:
    """The serving model version the request names: 404 if unknown, 503 while it is not ready.

    Also labels the request's metrics with the model name. The request holds a lease on the version
    until it is answered, so a swap or unload retires it only after this request
    (`service.runtime.model_control`).
    """
    model = runtime.get(query.model, query.version, canary=True)
    request.state.model = model.name
    model.require_ready()
    with model.lease():
        yield model


async def get_leased_model(request: Request, runtime: RuntimeDep) -> AsyncIterator[LoadedModel]:
    """The model version named by the path (``model_name``, optional ``model_version``), leased as in
    `get_model`: the Open Inference Protocol's routes."""
    model = runtime.get(
        request.path_params["model_name"], request.path_params.get("model_version"), canary=True
    )
    request.state.model = model.name
    with model.lease():
        yield model


async def get_control(request: Request) -> ModelControl:
    control: ModelControl = request.app.state.control
    return control


ModelDep = Annotated[LoadedModel, Depends(get_model)]
LeasedModelDep = Annotated[LoadedModel, Depends(get_leased_model)]
ControlDep = Annotated[ModelControl, Depends(get_control)]


async def get_capture(request: Request) -> SampleCapture:
    capture: SampleCapture = request.app.state.capture
    return capture


CaptureDep = Annotated[SampleCapture, Depends(get_capture)]


async def get_streams(request: Request) -> StreamManager:
    streams: StreamManager = request.app.state.streams
    return streams


StreamsDep = Annotated[StreamManager, Depends(get_streams)]

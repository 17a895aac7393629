"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.http.deps import LifecycleDep, RuntimeDep
from service.schemas import HealthStatus

router = APIRouter(tags=["health"])


@router.get("/health/live", response_model=HealthStatus)
async def live() -> HealthStatus:
    """200 while the process serves HTTP at all (restart it when this fails)."""
    return HealthStatus(status="ok")


@router.get(
    "/health/ready",
    response_model=HealthStatus,
    responses={503: {"model": HealthStatus, "description": "loading, draining, or a model failed"}},
)
async def ready(runtime: RuntimeDep, lifecycle: LifecycleDep) -> JSONResponse:
    """200 only when every model is loaded, warmed up and batching, and the server is not draining."""
    if lifecycle.draining:
        body = HealthStatus(status="draining")
    elif runtime.ready:
        return JSONResponse(HealthStatus(status="ok").model_dump())
    else:
        detail = {key: value for key, value in runtime.status().items() if value != "ok"}
        detail = detail or {
            "models": "none loaded"
        }  # every model was unloaded (service.runtime.model_control)
        failed = any(value.startswith("failed") for value in detail.values())
        body = HealthStatus(status="failed" if failed else "loading", detail=detail)
    return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "1"})

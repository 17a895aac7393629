"""Prometheus scrape endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.http.deps import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics(registry: MetricsDep) -> Response:
    """Every service metric in the Prometheus text format (here unless ``DETECT_METRICS_PORT`` moves it)."""
    body, content_type = registry.exposition()
    return Response(body, media_type=content_type)

"""The request path's dependencies run on the event loop: FastAPI runs a plain ``def`` dependency (or
endpoint) in its thread pool, a thread round trip per call per request."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from service_testkit import make_settings

from service.app import create_app


def calls(dependant: Dependant) -> Iterator[object]:
    for sub in dependant.dependencies:
        yield from calls(sub)
    if dependant.call is not None:
        yield dependant.call


def runs_on_the_loop(call: object) -> bool:
    if inspect.isclass(call):  # a class dependency is constructed in the thread pool
        return False
    target = call if inspect.isfunction(call) else type(call).__call__  # an instance: its __call__
    return inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)


def api_calls(routes: list[object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """(path, call) of every endpoint and dependency, through included routers (and their own
    dependencies)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield from ((prefix + route.path, call) for call in calls(route.dependant))
        router = getattr(route, "original_router", None)
        if router is not None:
            for depends in router.dependencies:
                yield (prefix + router.prefix, depends.dependency)
            yield from api_calls(router.routes, prefix)


def test_no_route_hands_a_dependency_or_its_endpoint_to_a_thread(toy_repo: Path) -> None:
    app = create_app(make_settings(toy_repo))
    found = list(api_calls(app.routes))
    assert any(path == "/detect" for path, _ in found) and len(found) > 20
    offenders = sorted(
        {
            f"{path}: {getattr(call, '__qualname__', call)}"
            for path, call in found
            if not runs_on_the_loop(call)
        },
    )
    assert offenders == []

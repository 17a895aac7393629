"""Helpers of the POST /detect tests.
The toy model scores an image by its mean pixel value (score of row 0 = mean / 255), so every check
of "its own answer" compares a response with the grey level its request sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from service_testkit import encode, solid_image

from service.runtime.model_runtime import ModelRuntime

MakeClient = Callable[..., TestClient]


def post_png(client: TestClient, value: int = 255, path: str = "/detect", **params: str | int | float) -> Any:
    return client.post(
        path, params=params, content=encode(solid_image(value)), headers={"content-type": "image/png"}
    )


def batcher_of(client: TestClient, name: str) -> Any:
    app: Any = client.app
    runtime: ModelRuntime = app.state.runtime
    return runtime.get(name, None).batcher

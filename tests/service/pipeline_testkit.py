"""Helpers of the pipeline's tests: what a client's app holds, multipart image fields, a JPEG that will not
decode."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from service_testkit import encode

from service.runtime.admission import Resources


def resources_of(client: TestClient) -> Resources:
    resources: Resources = client.app.state.resources  # type: ignore[attr-defined]
    return resources


def held(client: TestClient) -> tuple[int, int, int]:
    """Body bytes held, image bytes held, requests in flight."""
    resources = resources_of(client)
    lifecycle: Any = client.app.state.lifecycle  # type: ignore[attr-defined]
    return resources.body_budget.used, resources.image_budget.used, lifecycle.in_flight


def files(*images: bytes) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]


def truncated_jpeg() -> bytes:
    """A JPEG whose header reads fine (so it is planned) and whose data ends early (so decoding fails)."""
    data = encode(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8), ".jpg")
    return data[: len(data) // 2]

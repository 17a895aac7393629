"""GET /v1/models and /v1/models/{name}: manifest metadata plus how the server runs each model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient


def test_list_models(make_client: Callable[..., TestClient], multi_repo: Path) -> None:
    client = make_client(multi_repo, model_overrides={"masks": {"max_batch_size": 2}})
    body = client.get("/v1/models").json()
    assert body["default_model"] == "a-stretch"  # declared by the repository's file 'default'
    by_name = {m["name"]: m for m in body["models"]}
    assert [name for name, m in by_name.items() if m["default"]] == ["a-stretch"]
    assert set(by_name) == {"a-stretch", "letterbox", "masks", "fixed"}  # latest version of each
    masks = by_name["masks"]
    assert masks["ready"] is True and masks["has_masks"] is True
    assert masks["backend"].endswith("onnxruntime[CPUExecutionProvider]")
    assert masks["batching"] == {"max_batch_size": 2, "max_queue_delay_ms": 2.0, "max_queue_size": 64}
    assert [label["name"] for label in masks["labels"]] == ["cat", "dog", "bird"]
    assert by_name["letterbox"]["input"]["resize"] == "letterbox"
    assert by_name["fixed"]["dynamic_batch"] is False and by_name["fixed"]["batching"]["max_batch_size"] == 4


def test_one_model_and_its_versions(make_client: Callable[..., TestClient], multi_repo: Path) -> None:
    client = make_client(multi_repo, versions="all")
    assert client.get("/v1/models/a-stretch").json()["version"] == "2"
    assert client.get("/v1/models/a-stretch", params={"version": "1"}).json()["version"] == "1"
    missing = client.get("/v1/models/nope")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": "unknown model 'nope'; this server has ['a-stretch', 'fixed', 'letterbox', 'masks']",
        "field": "model",
    }


def test_openapi_docs(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    detect = spec["paths"]["/detect"]["post"]
    assert "multipart/form-data" in detect["requestBody"]["content"]
    assert "image/jpeg" in detect["responses"]["200"]["content"]
    assert "DetectionResult" in spec["components"]["schemas"]
    assert "/v1/detect" in spec["paths"]


def test_unknown_path_uses_the_error_shape(client: TestClient) -> None:
    response = client.get("/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found", "field": None}

"""API keys, /docs and /metrics exposure settings."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from service_testkit import encode, make_settings, solid_image

from service.app import create_app
from service.http.auth import ApiKeyError, load_api_keys

MakeClient = Callable[..., TestClient]
PNG = {"content-type": "image/png"}


def test_without_a_key_the_api_answers_401_json_but_probes_stay_open(
    make_client: MakeClient, toy_repo: Path
) -> None:
    client = make_client(toy_repo, api_keys="k-one,k-two")
    missing = client.post("/detect", content=encode(solid_image(9)), headers=PNG)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="detect"'
    assert missing.json() == {
        "error": "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
        "field": "authorization",
    }
    wrong = client.get("/v1/models", headers={"authorization": "Bearer k-three"})
    assert wrong.status_code == 401 and wrong.json()["error"].startswith("invalid API key")
    assert client.get("/metrics").status_code == 401
    assert client.get("/health/live").status_code == 200
    assert client.get("/health/ready").status_code == 200
    assert client.get("/openapi.json").status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{"authorization": "Bearer k-two"}, {"authorization": "bearer  k-one "}, {"x-api-key": "k-one"}],
)
def test_a_valid_key_in_either_header_is_accepted(
    make_client: MakeClient, toy_repo: Path, headers: dict[str, str]
) -> None:
    client = make_client(toy_repo, api_keys="k-one,k-two")
    response = client.post("/detect", content=encode(solid_image(9)), headers={**PNG, **headers})
    assert response.status_code == 200


def test_keys_come_from_a_file_and_a_bad_file_stops_the_start(toy_repo: Path, tmp_path: Path) -> None:
    keys = tmp_path / "api-keys"
    keys.write_text("# rotated 2026-11\nalpha\n\n  beta  \n")
    assert load_api_keys(make_settings(toy_repo, api_keys_file=keys, api_keys="gamma")) == [
        "gamma",
        "alpha",
        "beta",
    ]
    with pytest.raises(ApiKeyError, match="cannot be read"):
        create_app(make_settings(toy_repo, api_keys_file=tmp_path / "missing"))
    keys.write_text("# no key yet\n")
    with pytest.raises(ApiKeyError, match="holds no key"):
        create_app(make_settings(toy_repo, api_keys_file=keys))


def test_docs_can_be_turned_off(make_client: MakeClient, toy_repo: Path) -> None:
    client = make_client(toy_repo, docs=False)
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404, path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_metrics_move_to_their_own_port(make_client: MakeClient, toy_repo: Path) -> None:
    port = free_port()
    client = make_client(toy_repo, metrics_port=port, api_keys="secret")
    assert client.get("/metrics", headers={"x-api-key": "secret"}).status_code == 404
    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)  # no key on the metrics port
    assert scraped.status_code == 200
    assert 'detect_model_ready{model="toy",version="1"} 1.0' in scraped.text

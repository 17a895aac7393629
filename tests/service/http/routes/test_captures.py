"""GET /v1/captures and its archive: behind the API key, and the archive is the COCO dataset."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from detect_testkit import post_png
from fastapi.testclient import TestClient
from service_testkit import wait_until

MakeClient = Callable[..., TestClient]


def test_capture_endpoints_need_the_key_when_keys_are_set(
    make_client: MakeClient, toy_repo: Path, tmp_path: Path
) -> None:
    client = make_client(toy_repo, api_keys="s3cret", capture_dir=tmp_path)
    for path in ("/v1/captures", "/v1/captures/archive"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"X-API-Key": "wrong"}).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_archive_is_the_captured_dataset(make_client: MakeClient, toy_repo: Path, tmp_path: Path) -> None:
    client = make_client(toy_repo, capture_dir=tmp_path, capture_random_share=1.0)
    for _ in range(3):
        assert post_png(client, 255).status_code == 200
    wait_until(lambda: client.get("/v1/captures").json()["images"] == 3)
    response = client.get("/v1/captures/archive")
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
        names = tar.getnames()
    assert names[0] == "annotations/instances_captured.json"
    assert len([n for n in names if n.startswith("captured/") and n.endswith(".png")]) == 3

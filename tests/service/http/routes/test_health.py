"""Liveness and readiness: unready before warm-up, ready when serving, unready while draining or failed."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from service_testkit import GatedFactory, encode, make_settings, solid_image

from service.app import create_app
from service.runtime.backends import Backend
from service.runtime.repository import ModelEntry
from service.settings import Settings


def test_not_ready_until_warmed_up(toy_repo: Path, gated: GatedFactory) -> None:
    gated.warmup_gate.clear()  # the warm-up inference blocks until the test lets it run
    app = create_app(make_settings(toy_repo), backend_factory=gated)
    with TestClient(app) as client:
        assert client.get("/health/live").status_code == 200
        response = client.get("/health/ready")
        assert response.status_code == 503
        assert response.json()["status"] == "loading"
        assert response.json()["detail"]["toy:1"] in ("pending", "loading", "warming")
        refused = client.post(
            "/detect", content=encode(solid_image(200)), headers={"content-type": "image/png"}
        )
        assert refused.status_code == 503 and "retry-after" in refused.headers
        gated.warmup_gate.set()
        assert client.portal is not None
        client.portal.call(app.state.runtime.wait_loaded)
        assert client.get("/health/ready").json() == {"status": "ok", "detail": {}}
        assert (
            client.post(
                "/detect", content=encode(solid_image(200)), headers={"content-type": "image/png"}
            ).status_code
            == 200
        )


def test_a_ready_model_knows_the_batch_times_its_warmup_measured(client: TestClient) -> None:
    """The warm-up's timed batches (a batch of one and a full one) seed the batcher's time model: its
    first estimates rest on measurements, it knows a batch's fixed cost before serving one, and each
    warmed size stands on its warmup time until served batches of that size replace it."""
    model = client.app.state.runtime.get("toy", None)  # type: ignore[attr-defined]
    full = model.batching.max_batch_size
    assert sorted(model.warmup_seconds) == [1, full]
    times = model.batcher.batch_times
    assert times.known and times.fitted
    assert times.measured(1) and times.measured(full)
    assert times.size_seconds(1) == model.warmup_seconds[1] > 0
    assert times.size_seconds(full) == model.warmup_seconds[full]


def test_draining_fails_readiness_and_refuses_new_requests(client: TestClient) -> None:
    assert client.get("/health/ready").status_code == 200
    client.app.state.lifecycle.begin_drain()  # type: ignore[attr-defined]
    response = client.get("/health/ready")
    assert response.status_code == 503 and response.json()["status"] == "draining"
    refused = client.post("/detect", content=encode(solid_image(200)), headers={"content-type": "image/png"})
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert "shutting down" in refused.json()["error"]
    assert client.get("/health/live").status_code == 200


def test_a_model_that_fails_to_load_keeps_the_server_unready(toy_repo: Path) -> None:
    def broken(entry: ModelEntry, settings: Settings) -> Backend:
        raise RuntimeError("engine built for another GPU")

    app = create_app(make_settings(toy_repo), backend_factory=broken)
    with TestClient(app) as client:
        assert client.portal is not None
        client.portal.call(app.state.runtime.wait_loaded)
        response = client.get("/health/ready")
        assert response.status_code == 503
        assert response.json()["status"] == "failed"
        assert "engine built for another GPU" in response.json()["detail"]["toy:1"]
        assert client.get("/v1/models").json()["models"][0]["ready"] is False


def test_a_stopped_batcher_turns_readiness_off(client: TestClient) -> None:
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    batcher = runtime.get("toy", None).batcher
    assert client.portal is not None
    client.portal.call(batcher.stop)
    response = client.get("/health/ready")
    assert response.status_code == 503
    assert response.json()["status"] == "failed"
    assert response.json()["detail"]["toy:1"].startswith("failed: batcher stopped")
    refused = client.post("/detect", content=encode(solid_image(200)), headers={"content-type": "image/png"})
    assert refused.status_code == 503

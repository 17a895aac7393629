"""The live model repository: load a new version beside the old, switch, drain and free the old one;
failed loads change nothing; unload; index; folder polling."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_testkit import GatedFactory, add_toy_model, encode, solid_image, wait_until

from contract.manifest import MANIFEST_FILE
from service.runtime.model_control import ModelControl
from service.runtime.model_runtime import ModelRuntime

MakeClient = Callable[..., TestClient]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    add_toy_model(tmp_path, "toy", "1")
    return tmp_path


def runtime_of(client: TestClient) -> ModelRuntime:
    app: Any = client.app
    runtime: ModelRuntime = app.state.runtime
    return runtime


def detect(client: TestClient, model: str | None = None) -> Any:
    params = {"model": model} if model else {}
    return client.post(
        "/detect", params=params, content=encode(solid_image(200)), headers={"content-type": "image/png"}
    )


def metric(client: TestClient, line_start: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{line_start} not in /metrics")


def test_load_swaps_to_the_new_version_and_frees_the_old(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    old = runtime_of(client).get("toy", None)
    assert detect(client).json()["version"] == "1"
    add_toy_model(repo, "toy", "2")
    response = client.post("/v2/repository/models/toy/load")
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "toy", "versions": ["2"]}
    assert detect(client).json()["version"] == "2"
    wait_until(lambda: old.state == "stopped", what="the old version to be retired")
    assert old.batcher is not None and not old.batcher.alive
    assert metric(client, "detect_loaded_model_versions") == 1
    assert metric(client, 'detect_model_load_seconds_count{model="toy"}') == 2
    assert 'detect_model_ready{model="toy",version="1"}' not in client.get("/metrics").text
    index = client.post("/v2/repository/index").json()
    assert index == [
        {"name": "toy", "version": "1", "state": "UNAVAILABLE", "reason": "not loaded"},
        {"name": "toy", "version": "2", "state": "READY", "reason": ""},
    ]
    assert client.post("/v2/repository/index", json={"ready": True}).json() == [index[1]]


def test_loading_unchanged_files_keeps_the_serving_version(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    serving = runtime_of(client).get("toy", None)
    assert client.post("/v2/repository/models/toy/load").status_code == 200
    assert runtime_of(client).get("toy", None) is serving and serving.ready


def test_a_request_in_flight_finishes_on_the_old_version(
    make_client: MakeClient, gated: GatedFactory, repo: Path
) -> None:
    client = make_client(repo, repository_api=True)
    old_backend = gated.backends["toy"]
    old_backend.gate.clear()
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(detect, client)
        assert old_backend.entered.wait(10)
        add_toy_model(repo, "toy", "2")
        assert client.post("/v2/repository/models/toy/load").status_code == 200
        assert detect(client).json()["version"] == "2"  # new requests: the new version, at once
        assert runtime_of(client).get("toy", None).version == "2"
        old_backend.gate.set()
        answer = in_flight.result(10)
    assert answer.status_code == 200 and answer.json()["version"] == "1"


def test_a_version_swapped_out_keeps_serving_the_requests_that_resolved_it(
    make_client: MakeClient, repo: Path
) -> None:
    """A request that resolved version 1 before the switch (e.g. still uploading its body) is admitted
    and computed by version 1 afterwards; version 1 is freed only when that request let go of it."""
    client = make_client(repo, repository_api=True)
    runtime = runtime_of(client)
    app: Any = client.app
    control: ModelControl = app.state.control
    add_toy_model(repo, "toy", "2")

    async def scenario() -> tuple[str, float, str]:
        old = runtime.get("toy", None)
        with old.lease():
            await control.load("toy")
            await asyncio.sleep(0.05)  # the retirement has started and waits for this lease
            old.admit(1, None)
            output = await old.submit(np.full((64, 64, 3), 255, np.uint8), None)
            state_while_leased = old.state
        await control.wait_retired()
        return state_while_leased, float(output["detection_scores"][0]), old.state

    assert client.portal is not None
    leased_state, score, final_state = client.portal.call(scenario)
    assert (leased_state, final_state) == ("ready", "stopped")
    assert score == pytest.approx(1.0)
    assert runtime.get("toy", None).version == "2"


def test_a_failed_load_leaves_the_serving_version_untouched(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    broken = add_toy_model(repo, "toy", "2")
    manifest = json.loads((broken / MANIFEST_FILE).read_text())
    (broken / MANIFEST_FILE).write_text(json.dumps({**manifest, "max_detections": 0}))
    response = client.post("/v2/repository/models/toy/load")
    assert response.status_code == 400
    assert "failed to load 'toy'" in response.json()["error"] and "max_detections" in response.json()["error"]
    assert detect(client).json()["version"] == "1"
    assert metric(client, 'detect_model_load_failures_total{model="toy"}') == 1
    (broken / MANIFEST_FILE).write_text(json.dumps(manifest))
    (broken / "model.onnx").write_bytes(b"not an onnx graph")  # manifest fine, graph broken: backend fails
    response = client.post("/v2/repository/models/toy/load")
    assert response.status_code == 400 and "version '2'" in response.json()["error"]
    assert detect(client).json()["version"] == "1"
    assert client.get("/health/ready").status_code == 200
    index = {row["version"]: row for row in client.post("/v2/repository/index").json()}
    assert index["1"]["state"] == "READY"
    assert index["2"]["state"] == "UNAVAILABLE" and "version '2'" in index["2"]["reason"]
    assert metric(client, 'detect_model_load_failures_total{model="toy"}') == 2


def test_unload_then_load_again(make_client: MakeClient, repo: Path) -> None:
    add_toy_model(repo, "other")
    client = make_client(repo, default_model="toy", repository_api=True)
    assert client.post("/v2/repository/models/toy/unload").status_code == 200
    missing = detect(client)
    assert missing.status_code == 404
    assert "default model 'toy' is not loaded" in missing.json()["error"]
    assert detect(client, "other").status_code == 200
    assert client.get("/v2/models/toy").status_code == 404
    assert client.post("/v2/repository/models/toy/unload").status_code == 200  # already unloaded: fine
    assert client.post("/v2/repository/models/ghost/unload").status_code == 404
    assert client.post("/v2/repository/models/.hidden/unload").status_code == 400
    assert client.post("/v2/repository/models/toy/load").status_code == 200
    assert detect(client).json()["model"] == "toy"


def test_unloading_every_model_fails_readiness_with_a_reason(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    assert client.post("/v2/repository/models/toy/unload").status_code == 200
    ready = client.get("/health/ready")
    assert ready.status_code == 503 and ready.json()["detail"] == {"models": "none loaded"}
    assert client.get("/v2/health/ready").status_code == 400


def test_load_refuses_unknown_names_and_overrides(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    assert "not in the repository" in client.post("/v2/repository/models/ghost/load").json()["error"]
    assert client.post("/v2/repository/models/..x/load").status_code == 400
    override = client.post("/v2/repository/models/toy/load", json={"parameters": {"config": "{}"}})
    assert override.status_code == 400 and "not supported" in override.json()["error"]
    assert client.post("/v2/repository/models/toy/load", content=b"{bad").status_code == 400


def test_polling_loads_new_versions_and_unloads_removed_models(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_poll_s=0.05)
    runtime = runtime_of(client)
    add_toy_model(repo, "toy", "2")
    wait_until(lambda: runtime.get("toy", None).version == "2", what="the poll to load version 2")
    add_toy_model(repo, "extra")
    wait_until(lambda: "extra" in runtime.models, what="the poll to load a new model")
    shutil.rmtree(repo / "extra")
    wait_until(lambda: "extra" not in runtime.models, what="the poll to unload a removed model")
    assert detect(client).json()["version"] == "2"


def test_concurrent_loads_of_one_model_are_serialized(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    add_toy_model(repo, "toy", "2")
    results: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(client.post("/v2/repository/models/toy/load").status_code)
        )
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [200, 200, 200]
    assert metric(client, 'detect_model_load_seconds_count{model="toy"}') == 2  # version 2 loaded once

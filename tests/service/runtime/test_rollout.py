"""Rolling a candidate version out: the canary split, shadow copies compared at IoU 0.5, undo in one call,
and disagreement kept by sample capture."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from service_testkit import GatedFactory, add_toy_model, encode, solid_image, wait_until

from contract.manifest import MANIFEST_FILE
from service.pipeline.shadow import Found, agreement, matched
from service.runtime.model_runtime import ModelRuntime
from service.runtime.rollout import RolloutPlan, Rollouts

MakeClient = Callable[..., TestClient]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    add_toy_model(tmp_path / "models", "toy", "1")
    add_toy_model(tmp_path / "models", "toy", "2")
    return tmp_path / "models"


def set_display_threshold(repo: Path, version: str, threshold: float) -> None:
    path = repo / "toy" / version / MANIFEST_FILE
    manifest = json.loads(path.read_text())
    manifest["display_score_threshold"] = threshold
    path.write_text(json.dumps(manifest))


def runtime_of(client: TestClient) -> ModelRuntime:
    app: Any = client.app
    runtime: ModelRuntime = app.state.runtime
    return runtime


def detect(client: TestClient, **params: str) -> Any:
    response = client.post(
        "/detect", params=params, content=encode(solid_image(200)), headers={"content-type": "image/png"}
    )
    assert response.status_code == 200, response.text
    return response.json()


def metric(client: TestClient, series: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")


# ------------------------------------------------------------------ agreement


def found(*rows: tuple[float, float, float, float, int]) -> Found:
    boxes = np.array([r[:4] for r in rows], dtype=np.float64).reshape(-1, 4)
    return Found(boxes, np.array([r[4] for r in rows], dtype=np.int64))


def test_agreement_matches_one_to_one_by_class_at_iou_half() -> None:
    a = found((0, 0, 10, 10, 1), (20, 20, 30, 30, 2))
    assert agreement(a, a) == (1.0, 2)
    assert agreement(found(), found()) == (1.0, 0)  # neither found anything: they agree
    assert agreement(a, found()) == (0.0, 0)
    assert agreement(a, found((0, 0, 10, 10, 2), (20, 20, 30, 30, 2))) == (0.5, 1)  # a class differs
    # IoU of (0,0,10,10) with (0,0,10,20) is 0.5: matched; with (0,0,10,21) it is below: not matched.
    assert matched(found((0, 0, 10, 10, 1)), found((0, 0, 10, 20, 1))) == 1
    assert matched(found((0, 0, 10, 10, 1)), found((0, 0, 10, 21, 1))) == 0
    # Two candidates over one serving box: one pair, not two.
    assert agreement(found((0, 0, 10, 10, 1)), found((0, 0, 10, 10, 1), (0, 0, 10, 11, 1))) == (0.5, 1)


def test_the_canary_share_is_drawn_per_request() -> None:
    rollouts = Rollouts(CollectorRegistry(), seed=3)
    assert rollouts.version_for("toy", canary=True) is None  # no plan
    rollouts.set("toy", RolloutPlan("1", "2", canary_percent=30))
    draws = [rollouts.version_for("toy", canary=True) for _ in range(2000)]
    share = draws.count("2") / len(draws)
    assert 0.26 < share < 0.34, share  # 30 % +- 4 standard deviations of a binomial(2000, 0.3) share
    assert rollouts.version_for("toy", canary=False) == "1"  # metadata: the serving version
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        rollouts.set("toy", RolloutPlan("1", "2", canary_percent=101))
    assert rollouts.clear("toy") is not None and rollouts.version_for("toy", canary=True) is None


# ------------------------------------------------------------------ through the app


def test_canary_serves_the_candidate_share_and_undo_restores_the_serving_version(
    make_client: MakeClient, repo: Path
) -> None:
    client = make_client(repo, repository_api=True)  # versions=latest: version 2 serves
    assert detect(client)["version"] == "2"
    # Roll version 2's predecessor back in as the candidate of a rollout: 1 is the candidate here.
    started = client.post("/v2/repository/models/toy/rollout", json={"candidate": "1", "canary_percent": 100})
    assert started.status_code == 200, started.text
    assert started.json() == {
        "name": "toy",
        "serving": "2",
        "candidate": "1",
        "canary_percent": 100.0,
        "shadow_percent": 0.0,
        "state": "active",
    }
    assert {detect(client)["version"] for _ in range(5)} == {"1"}
    assert detect(client, version="2")["version"] == "2"  # a named version is never rerouted
    assert client.get("/v1/models/toy").json()["version"] == "2"  # metadata: the serving version
    assert metric(client, 'detect_rollout_canary_percent{model="toy"}') == 100
    assert metric(client, 'detect_rollout_routed_total{model="toy",role="candidate",version="1"}') == 5

    candidate = runtime_of(client).models["toy"]["1"]
    ended = client.post("/v2/repository/models/toy/rollout/end")
    assert ended.status_code == 200 and ended.json()["state"] == "ended"
    assert {detect(client)["version"] for _ in range(5)} == {"2"}
    wait_until(lambda: candidate.state == "stopped", what="the candidate to be retired")
    assert sorted(runtime_of(client).models["toy"]) == ["2"]
    assert metric(client, 'detect_rollout_canary_percent{model="toy"}') == 0


def test_shadow_compares_without_changing_the_answer(make_client: MakeClient, repo: Path) -> None:
    # The toy finds 3 objects in a bright image, scored 0.78, 0.71 and 0.63: the candidate, with a
    # display threshold of 0.75, shows 1 of them, so each image agrees 1 / 3.
    set_display_threshold(repo, "1", 0.75)
    client = make_client(repo, repository_api=True)
    response = client.post(
        "/v2/repository/models/toy/rollout", json={"candidate": "1", "shadow_percent": 100}
    )
    assert response.status_code == 200, response.text
    answers = [detect(client) for _ in range(4)]
    assert {a["version"] for a in answers} == {"2"}
    wait_until(
        lambda: metric(client, 'detect_shadow_requests_total{model="toy",result="compared"}') == 4,
        what="four compared shadow copies",
    )
    assert metric(client, 'detect_shadow_agreement_count{model="toy"}') == 4
    assert metric(client, 'detect_shadow_agreement_sum{model="toy"}') == pytest.approx(4 / 3)
    assert metric(client, 'detect_shadow_detections_total{model="toy",role="serving"}') == 12
    assert metric(client, 'detect_shadow_detections_total{model="toy",role="candidate"}') == 4
    assert metric(client, 'detect_shadow_detections_total{model="toy",role="matched"}') == 4


def test_a_busy_candidate_drops_shadow_copies_and_never_delays_the_answer(
    make_client: MakeClient, gated: GatedFactory, repo: Path
) -> None:
    client = make_client(repo, repository_api=True, rollout_shadow_max_in_flight=1)
    response = client.post(
        "/v2/repository/models/toy/rollout", json={"candidate": "1", "shadow_percent": 100}
    )
    assert response.status_code == 200, response.text
    candidate_backend = gated.backends["toy"]  # the last one built: version 1's
    candidate_backend.gate.clear()  # the candidate hangs
    try:
        started = time.monotonic()
        assert {detect(client)["version"] for _ in range(4)} == {"2"}
        assert time.monotonic() - started < 5
        assert candidate_backend.entered.wait(10)
        assert metric(client, 'detect_shadow_requests_total{model="toy",result="busy"}') == 3
    finally:
        candidate_backend.gate.set()
    wait_until(
        lambda: metric(client, 'detect_shadow_requests_total{model="toy",result="compared"}') == 1,
        what="the one copy that ran",
    )


def test_disagreement_between_versions_is_captured(
    make_client: MakeClient, repo: Path, tmp_path: Path
) -> None:
    set_display_threshold(repo, "1", 0.99)  # the candidate shows nothing: agreement 0
    client = make_client(
        repo,
        repository_api=True,
        capture_dir=tmp_path / "captures",
        capture_score_band="off",
        capture_min_detections=0,
    )
    response = client.post(
        "/v2/repository/models/toy/rollout", json={"candidate": "1", "shadow_percent": 100}
    )
    assert response.status_code == 200, response.text
    detect(client)
    wait_until(
        lambda: client.get("/v1/captures").json()["by_reason"].get("disagreement") == 1,
        what="the image the versions disagree on to be captured",
    )
    assert metric(client, 'detect_captured_total{reason="disagreement"}') == 1


def test_rollout_refuses_what_it_cannot_do(make_client: MakeClient, repo: Path) -> None:
    client = make_client(repo, repository_api=True)
    rollout = "/v2/repository/models/toy/rollout"
    cases = [
        ({}, 400, "Field required"),
        ({"candidate": "2"}, 400, "already serves"),
        ({"candidate": "7"}, 400, "no version '7'"),
        ({"candidate": "1", "canary_percent": 150}, 400, "canary_percent"),
        ({"candidate": 1}, 400, "candidate"),
    ]
    for body, status, text in cases:
        response = client.post(rollout, json=body)
        assert response.status_code == status and text in response.text, (body, response.text)
    assert client.post("/v2/repository/models/nope/rollout", json={"candidate": "1"}).status_code == 404
    assert client.post(rollout + "/end").status_code == 404  # none stands
    assert detect(client)["version"] == "2"  # nothing changed

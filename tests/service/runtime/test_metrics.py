"""/metrics: every stage is measured per model, batch and request accounting, and the exposition is valid."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from service_testkit import encode, make_settings, solid_image

from service.app import create_app
from service.runtime.metrics import STAGES


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def exercise(client: TestClient) -> str:
    png = encode(solid_image(200))
    assert client.post("/detect", content=png, headers={"content-type": "image/png"}).status_code == 200
    assert (
        client.post(
            "/detect", params={"format": "jpeg"}, content=png, headers={"content-type": "image/png"}
        ).status_code
        == 200
    )
    files = [("images", ("a.png", png, "image/png"))] * 3
    assert client.post("/detect", files=files).status_code == 200
    assert client.post("/detect", content=b"junk", headers={"content-type": "image/png"}).status_code == 400
    assert (
        client.post(
            "/detect", params={"model": "nope"}, content=png, headers={"content-type": "image/png"}
        ).status_code
        == 404
    )
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def test_stages_batches_and_requests_are_recorded(client: TestClient) -> None:
    values = samples(exercise(client))
    toy = (("model", "toy"),)
    for stage in STAGES:
        assert values[(f"detect_{stage}_seconds_count", toy)] >= 1, stage
    assert values[("detect_decode_seconds_count", toy)] == 5  # 1 + 1 + 3 decodable images
    # once per image: every image is postprocessed, then either encoded as JSON or rendered
    assert values[("detect_postprocess_seconds_count", toy)] == 5
    assert values[("detect_encode_seconds_count", toy)] == 4
    assert values[("detect_render_seconds_count", toy)] == 1
    assert values[("detect_request_seconds_count", toy)] == 4  # the unknown-model request has no model label
    assert values[("detect_batch_size_sum", toy)] == 5  # every image went through a batch
    batches = sum(
        values[("detect_batches_total", (("model", "toy"), ("reason", r)))]
        for r in ("full", "delay", "deadline", "drain", "idle")
    )
    assert batches == values[("detect_batch_size_count", toy)]
    assert values[("detect_requests_total", (("code", "200"), ("model", "toy")))] == 3
    assert values[("detect_requests_total", (("code", "400"), ("model", "toy")))] == 1
    assert values[("detect_requests_total", (("code", "404"), ("model", "none")))] == 1
    assert values[("detect_queue_depth", toy)] == 0
    assert values[("detect_in_flight_requests", ())] == 0
    assert values[("detect_model_ready", (("model", "toy"), ("version", "1")))] == 1


def test_each_app_has_its_own_registry(make_client: Callable[..., TestClient], toy_repo: Path) -> None:
    first, second = make_client(toy_repo), make_client(toy_repo)
    exercise(first)
    untouched = samples(second.get("/metrics").text)
    assert untouched[("detect_batch_size_count", (("model", "toy"),))] == 0
    # Creating more apps never trips prometheus-client's duplicate-registration error.
    create_app(make_settings(toy_repo))


def test_exposition_passes_promtool(client: TestClient, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool not installed (Debian package 'prometheus'; "
            "scripts/dev/install-system-deps.sh installs it)"
        )
    text = exercise(client)
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readiness_gauge_answers_as_the_probe_does(client: TestClient) -> None:
    def ready_gauge() -> float:
        return samples(client.get("/metrics").text)[("detect_ready", ())]

    assert client.get("/health/ready").status_code == 200
    assert ready_gauge() == 1
    client.app.state.lifecycle.begin_drain()  # type: ignore[attr-defined]
    assert client.get("/health/ready").status_code == 503
    assert ready_gauge() == 0


def test_memory_bound_is_the_loaded_baseline_plus_the_budgets(
    make_client: Callable[..., TestClient], toy_repo: Path
) -> None:
    body, image = 8 * 2**20, 24 * 2**20
    values = samples(
        make_client(toy_repo, body_memory_bytes=body, image_memory_bytes=image).get("/metrics").text
    )
    rss = values[("process_resident_memory_bytes", ())]
    baseline = values[("detect_memory_bound_bytes", ())] - body - image
    # The baseline is the RSS taken after the toy model loaded: a Python process with numpy, tens of MB.
    assert 10 * 2**20 < baseline <= rss * 1.5, (baseline, rss)

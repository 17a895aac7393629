"""The self-check at load on a real trained SSD300: golden inputs that agree pass; a perturbed model fails
and is served anyway, replaced by its fp32 parent, or refused; broken golden files fail the load; an
artifact without golden inputs is served with a warning; an unknown ONEDNN_MAX_CPU_ISA stops the start."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx  # dev dependency: the test perturbs a graph; the service never imports it
import pytest
from fastapi.testclient import TestClient
from onnx import numpy_helper
from service_testkit import PROJECT, encode, make_settings, serve_command, start_client

from contract.cpu_classes import ISA_ENV, UnknownIsaError, cpu_flags, effective_class
from contract.geometry import resize_for_network
from contract.manifest import Manifest, Parent, SelfCheckSpec
from contract.self_check import MIN_AGREEMENT, SCORE_TOLERANCE, golden_spec, write_golden
from service.app import create_app
from service.runtime.backends import load_artifact
from training.data.synthetic import render_sample

SHIPPED = PROJECT / "models" / "ssd300-synth" / "1"


@dataclass(frozen=True)
class Artifacts:
    """The shipped fp32 SSD300, a perturbed copy of it, and golden inputs made with the original."""

    manifest: Manifest
    model: Path
    perturbed: Path  # its first convolution's weights negated
    golden: Path
    spec: SelfCheckSpec
    parent: Parent  # the shipped model as the parent ``p`` version 1
    image: bytes  # a PNG the tests send


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    root = tmp_path_factory.mktemp("self-check-artifacts")
    manifest = Manifest.read(SHIPPED)
    rng = np.random.default_rng(11)
    images = np.stack([resize_for_network(render_sample(rng)[0], manifest.input)[0] for _ in range(2)])
    backend = load_artifact(SHIPPED, "cpu", make_settings(root))
    try:
        outputs = backend.infer(images)
        reference = backend.description
    finally:
        backend.close()
    assert (outputs["detection_scores"] >= manifest.default_threshold + SCORE_TOLERANCE).sum() >= 2
    file, sha256 = write_golden(root, images, outputs)
    spec = golden_spec(
        file,
        sha256,
        len(images),
        manifest.default_threshold,
        f"{reference} as CPU class {effective_class(cpu_flags())}",
    )
    graph = onnx.load(str(SHIPPED / manifest.file))
    weights = next(init for init in graph.graph.initializer if len(init.dims) == 4)  # the stem convolution
    weights.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(weights), weights.name))
    onnx.save(graph, str(root / "perturbed.onnx"))
    sha_model = hashlib.sha256((SHIPPED / manifest.file).read_bytes()).hexdigest()
    image, _ = render_sample(np.random.default_rng(5))
    return Artifacts(
        manifest=manifest,
        model=SHIPPED / manifest.file,
        perturbed=root / "perturbed.onnx",
        golden=root / file,
        spec=spec,
        parent=Parent(name="p", version="1", file_sha256=sha_model),
        image=encode(image, ".png"),
    )


def add_version(
    repo: Path,
    name: str,
    artifacts: Artifacts,
    *,
    perturbed: bool = False,
    parent: Parent | None = None,
    golden: bool = True,
) -> Path:
    """``repo/name/1``: the shipped model (or its perturbed copy) with golden inputs, as ``name``."""
    directory = repo / name / "1"
    directory.mkdir(parents=True)
    shutil.copyfile(artifacts.perturbed if perturbed else artifacts.model, directory / "model.onnx")
    if golden:
        shutil.copyfile(artifacts.golden, directory / artifacts.spec.file)
    update = {
        "name": name,
        "file": "model.onnx",
        "parent": parent,
        "self_check": artifacts.spec if golden else None,
    }
    artifacts.manifest.model_copy(update=update).write(directory)
    return directory


@pytest.fixture
def clients() -> Iterator[list[TestClient]]:
    started: list[TestClient] = []
    yield started
    for client in started:
        client.__exit__(None, None, None)


def serve(clients: list[TestClient], repo: Path, **settings: object) -> TestClient:
    values: dict[str, object] = {"backend": "cpu", "max_batch_size": 2, "warmup": False, **settings}
    client = start_client(create_app(make_settings(repo, **values)))
    clients.append(client)
    return client


def self_check(client: TestClient, name: str) -> dict[str, Any]:
    body = client.get(f"/v1/models/{name}").json()
    result: dict[str, Any] = body["self_check"]
    return result


def metric_lines(client: TestClient, name: str) -> list[str]:
    return [line for line in client.get("/metrics").text.splitlines() if line.startswith(name + "{")]


def detect(client: TestClient, artifacts: Artifacts, model: str, **params: str) -> Any:
    return client.post(
        "/detect",
        params={"model": model, "score_threshold": "0.3", **params},
        content=artifacts.image,
        headers={"content-type": "image/png"},
    )


def test_golden_inputs_that_agree_pass_and_an_artifact_without_them_is_served_with_a_warning(
    tmp_path: Path, artifacts: Artifacts, clients: list[TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    add_version(tmp_path, "v", artifacts, parent=artifacts.parent)
    add_version(tmp_path, "old", artifacts, golden=False)
    with caplog.at_level(logging.INFO, logger="service.runtime.self_check"):
        client = serve(clients, tmp_path, repository_api=True)
    passed = self_check(client, "v")
    assert passed["status"] == "passed" and passed["agreement"] == 1.0 and passed["action"] == "served"
    assert (passed["missing"], passed["unexpected"], passed["moved"]) == (0, 0, 0) and passed["agreeing"] >= 2
    assert passed["images"] == 2 and passed["min_agreement"] == MIN_AGREEMENT
    assert passed["cpu_class"] == effective_class(cpu_flags()) and passed["policy"] == "fallback"
    assert passed["served_by"] is None and passed["reference"] == artifacts.spec.reference
    states = metric_lines(client, "detect_model_self_check")
    assert 'detect_model_self_check{detect_model_self_check="passed",model="v",version="1"} 1.0' in states
    assert 'detect_model_self_check{detect_model_self_check="failed",model="v",version="1"} 0.0' in states
    assert metric_lines(client, "detect_model_self_check_agreement") == [
        'detect_model_self_check_agreement{model="v",version="1"} 1.0'  # none for "old": nothing compared
    ]
    answer = detect(client, artifacts, "v")
    assert answer.status_code == 200 and "served_by" not in answer.json() and answer.json()["detections"]

    absent = self_check(client, "old")
    assert absent["status"] == "absent" and absent["agreement"] is None and absent["action"] == "served"
    assert client.get("/v1/models/old").json()["ready"] is True
    assert 'detect_model_self_check{detect_model_self_check="absent",model="old",version="1"} 1.0' in (
        metric_lines(client, "detect_model_self_check")
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("model old version 1: the artifact carries no golden inputs") for m in warnings)
    assert not any("model v version 1" in m for m in warnings)
    assert client.get("/health/ready").status_code == 200

    # A version loaded while serving is checked too, and shows once it serves.
    shutil.copytree(tmp_path / "v" / "1", tmp_path / "v" / "2")
    manifest = Manifest.read(tmp_path / "v" / "2")
    manifest.model_copy(update={"version": "2"}).write(tmp_path / "v" / "2")
    assert client.post("/v2/repository/models/v/load").status_code == 200
    assert (
        self_check(client, "v")["status"] == "passed" and client.get("/v1/models/v").json()["version"] == "2"
    )
    assert 'detect_model_self_check{detect_model_self_check="passed",model="v",version="2"} 1.0' in (
        metric_lines(client, "detect_model_self_check")
    )


def test_a_failed_check_with_warn_is_served_and_reported(
    tmp_path: Path, artifacts: Artifacts, clients: list[TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    add_version(tmp_path, "p", artifacts)
    add_version(tmp_path, "v", artifacts, perturbed=True, parent=artifacts.parent)
    with caplog.at_level(logging.ERROR, logger="service.runtime.self_check"):
        client = serve(clients, tmp_path, self_check_failure="warn")
    failed = self_check(client, "v")
    assert failed["status"] == "failed" and failed["action"] == "served_anyway" and failed["policy"] == "warn"
    assert (
        failed["agreement"] < MIN_AGREEMENT and failed["missing"] + failed["unexpected"] + failed["moved"] > 0
    )
    assert failed["served_by"] is None and "self-check failed on CPU class" in failed["detail"]
    assert 'detect_model_self_check{detect_model_self_check="failed",model="v",version="1"} 1.0' in (
        metric_lines(client, "detect_model_self_check")
    )
    gauges = dict(line.rsplit(" ", 1) for line in metric_lines(client, "detect_model_self_check_agreement"))
    assert float(gauges['detect_model_self_check_agreement{model="v",version="1"}']) == failed["agreement"]
    assert float(gauges['detect_model_self_check_agreement{model="p",version="1"}']) == 1.0
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(m.startswith("model v version 1: self-check failed") and "served anyway" in m for m in errors)
    served, parent = detect(client, artifacts, "v"), detect(client, artifacts, "p")
    assert served.status_code == parent.status_code == 200
    assert "served_by" not in served.json()
    assert served.json()["detections"] != parent.json()["detections"]  # the perturbed model answers


def test_a_failed_check_with_fallback_is_answered_by_the_fp32_parent(
    tmp_path: Path, artifacts: Artifacts, clients: list[TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    add_version(tmp_path, "p", artifacts)
    add_version(tmp_path, "v", artifacts, perturbed=True, parent=artifacts.parent)
    add_version(
        tmp_path,
        "orphan",
        artifacts,
        perturbed=True,
        parent=Parent(name="gone", version="1", file_sha256="0"),
    )
    impostor = artifacts.parent.model_copy(update={"file_sha256": "f" * 64})
    add_version(tmp_path, "impostor", artifacts, perturbed=True, parent=impostor)
    with caplog.at_level(logging.ERROR, logger="service.runtime.self_check"):
        client = serve(clients, tmp_path, warmup=True)

    info = client.get("/v1/models/v").json()
    fell_back = info["self_check"]
    assert info["ready"] is True and fell_back["status"] == "failed" and fell_back["action"] == "fell_back"
    assert (
        fell_back["served_by"] == "p:1" and "its fp32 parent p:1 serves in its place" in fell_back["detail"]
    )
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(m.startswith("model v version 1: self-check failed") and "p:1 serves" in m for m in errors)
    served, parent = detect(client, artifacts, "v"), detect(client, artifacts, "p")
    assert served.status_code == parent.status_code == 200
    assert served.json()["served_by"] == "p:1" and served.json()["model"] == "v"
    assert served.json()["detections"] == parent.json()["detections"] and parent.json()["detections"]
    boxed = detect(client, artifacts, "v", format="jpeg")
    assert boxed.status_code == 200 and boxed.headers["x-served-by"] == "p:1"

    for name, reason in (
        ("orphan", "no fallback: its parent gone:1 cannot be read from the model repository"),
        ("impostor", "no fallback: the repository's p:1 (.*) is not the file the variant was made from"),
    ):
        refused = self_check(client, name)
        assert refused["action"] == "refused" and refused["served_by"] is None
        assert re.search(reason, refused["detail"]), refused["detail"]
        assert client.get(f"/v1/models/{name}").json()["ready"] is False
    detail = client.get("/health/ready").json()["detail"]
    assert set(detail) == {"orphan:1", "impostor:1"}
    assert detail["orphan:1"].startswith("failed: SelfCheckRefused: self-check failed")


def test_a_failed_check_with_refuse_leaves_the_version_not_ready(
    tmp_path: Path, artifacts: Artifacts, clients: list[TestClient]
) -> None:
    add_version(tmp_path, "p", artifacts)
    add_version(tmp_path, "v", artifacts, perturbed=True, parent=artifacts.parent)
    client = serve(clients, tmp_path, self_check_failure="refuse")
    refused = self_check(client, "v")
    assert refused["status"] == "failed" and refused["action"] == "refused" and refused["policy"] == "refuse"
    assert client.get("/v1/models/v").json()["ready"] is False
    answer = detect(client, artifacts, "v")
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    assert answer.json()["error"].startswith(
        "model 'v' version '1' is failed: SelfCheckRefused: self-check failed on CPU class"
    )
    ready = client.get("/health/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "failed"
    assert "self_check_failure=refuse" in ready.json()["detail"]["v:1"]
    assert 'detect_model_load_failures_total{model="v"} 1.0' in client.get("/metrics").text
    assert 'detect_model_self_check{detect_model_self_check="failed",model="v",version="1"} 1.0' in (
        metric_lines(client, "detect_model_self_check")
    )
    assert detect(client, artifacts, "p").status_code == 200  # the parent itself serves


def test_a_missing_truncated_or_foreign_golden_file_fails_the_load_naming_it(
    tmp_path: Path, artifacts: Artifacts, clients: list[TestClient]
) -> None:
    missing = add_version(tmp_path, "missing", artifacts)
    (missing / "golden.npz").unlink()
    truncated = add_version(tmp_path, "truncated", artifacts)
    data = (truncated / "golden.npz").read_bytes()
    (truncated / "golden.npz").write_bytes(data[: len(data) // 2])
    foreign = add_version(tmp_path, "foreign", artifacts)
    other_images = np.zeros((2, artifacts.manifest.input.height, artifacts.manifest.input.width, 3), np.uint8)
    with np.load(artifacts.golden) as golden:
        write_golden(foreign, other_images, dict(golden))  # another model version's file
    client = serve(clients, tmp_path)
    detail = client.get("/health/ready").json()["detail"]
    for directory, reason in (
        (missing, "cannot be read"),
        (truncated, "truncated, or written for another version of the model"),
        (foreign, "truncated, or written for another version of the model"),
    ):
        error = detail[f"{directory.parent.name}:1"]
        assert error.startswith(f"failed: GoldenFileError: golden file {directory / 'golden.npz'}"), error
        assert reason in error
        info = client.get(f"/v1/models/{directory.parent.name}").json()
        assert info["ready"] is False and info["self_check"] is None


def test_an_unknown_onednn_cap_stops_the_server_from_starting(
    tmp_path: Path, artifacts: Artifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_version(tmp_path, "old", artifacts, golden=False)
    monkeypatch.setenv(ISA_ENV, "AVX3")
    with pytest.raises(UnknownIsaError, match="AVX512_CORE_AMX"):
        create_app(make_settings(tmp_path))
    started = subprocess.run(
        [*serve_command(), "--model-repository", str(tmp_path), "--port", "0"],
        env={**os.environ, ISA_ENV: "AVX3"},
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 2
    assert "detect-serve: ONEDNN_MAX_CPU_ISA='AVX3' is not an ISA oneDNN knows; use one of" in started.stderr
    assert "'AVX2', " in started.stderr and "'AVX512_CORE_VNNI', " in started.stderr
    monkeypatch.setenv(ISA_ENV, "avx2")  # a known value, any case: the app is made
    assert create_app(make_settings(tmp_path)).state.runtime is not None

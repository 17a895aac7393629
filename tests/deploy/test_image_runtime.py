"""`make image-test` runs the image with the Deployment's own settings (scripts/deploy/imagetest/): that the
podman arguments carry every setting of the rendered CPU overlay, and that its deliberate breakage still
applies to this Dockerfile. The image itself is built and run by `make image-test`, not here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import deploy_testkit as kit
import pytest

sys.path.insert(0, str(kit.ROOT / "scripts" / "deploy"))
from imagetest import base, breakage
from imagetest.container import run_arguments
from imagetest.pod import PodRuntime, pod_runtime


@pytest.fixture(scope="module")
def cpu_objects(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["overlays/cpu"]


@pytest.fixture(scope="module")
def runtime(cpu_objects: list[dict[str, Any]]) -> PodRuntime:
    return pod_runtime(cpu_objects, "detect", "detect")


def _arguments(runtime: PodRuntime) -> list[str]:
    sources = {mount.name: Path("/host") / mount.name for mount in runtime.mounts}
    return run_arguments(runtime, "img", "name", sources)


def _pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]


def test_security_settings_reach_podman(cpu_objects: list[dict[str, Any]], runtime: PodRuntime) -> None:
    spec = kit.one(cpu_objects, "Deployment")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    args = _arguments(runtime)
    assert _pairs(args, "--user") == [
        f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}"
    ]
    assert _pairs(args, "--group-add") == [str(spec["securityContext"]["fsGroup"])]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "--read-only" in args and "--read-only-tmpfs=false" in args
    assert _pairs(args, "--cap-drop") == container["securityContext"]["capabilities"]["drop"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert _pairs(args, "--security-opt") == ["no-new-privileges"]
    limit = kit.quantity_bytes(container["resources"]["limits"]["memory"])
    assert _pairs(args, "--memory") == [str(limit)] and _pairs(args, "--memory-swap") == [str(limit)]
    assert _pairs(args, "--stop-timeout") == [str(spec["terminationGracePeriodSeconds"])]


def test_environment_volumes_and_ports_reach_podman(
    cpu_objects: list[dict[str, Any]], runtime: PodRuntime
) -> None:
    deployment = kit.one(cpu_objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    (config_ref,) = container["envFrom"]
    config = next(
        o
        for o in kit.objects_of(cpu_objects, "ConfigMap")
        if o["metadata"]["name"] == config_ref["configMapRef"]["name"]
    )
    args = _arguments(runtime)
    assert _pairs(args, "--env") == [f"{k}={v}" for k, v in sorted(config["data"].items())]
    expected = [
        f"/host/{m['name']}:{m['mountPath']}:{'ro' if m.get('readOnly') else 'rw'}"
        for m in container["volumeMounts"]
    ]
    assert _pairs(args, "--volume") == expected
    assert sorted(_pairs(args, "--publish")) == sorted(
        f"127.0.0.1::{p['containerPort']}" for p in container["ports"]
    )
    api_keys = next(m for m in runtime.mounts if m.kind == "secret")
    assert api_keys.default_mode == 0o440 and api_keys.secret_items == {"api-keys": "api-keys"}
    assert {kind: probe.path for kind, probe in runtime.probes.items()} == {
        kind: container[kind]["httpGet"]["path"]
        for kind in ("startupProbe", "readinessProbe", "livenessProbe")
    }


def test_breakage_applies_to_the_serving_stage(tmp_path: Path) -> None:
    dockerfile = kit.parse_dockerfile(kit.ROOT / "Dockerfile")
    variant = breakage.broken_dockerfile(
        kit.ROOT / "Dockerfile", breakage.MISSING_LIBSTDCXX, tmp_path / "Dockerfile"
    )
    broken = kit.parse_dockerfile(variant)
    original_run = dockerfile.stages["serve-cpu"].all("RUN")
    assert broken.stages["serve-cpu"].all("RUN") == [
        *original_run,
        breakage.MISSING_LIBSTDCXX.instruction.removeprefix("RUN "),
    ]
    for name, stage in dockerfile.stages.items():
        if name != "serve-cpu":
            assert broken.stages[name].instructions == stage.instructions


def test_base_image_name_is_the_dockerfile_default() -> None:
    assert base.default_python_image(kit.ROOT / "Dockerfile") == "docker.io/library/python:3.11-slim"

"""Fixtures for the deployment tests (k8s/, Dockerfile); the helpers live in `deploy_testkit`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import deploy_testkit as kit
import pytest


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Every kustomization rendered once per session: {"overlays/cpu": [objects...], ...}."""
    kit.require_kubectl()
    return {name: kit.render(name) for name in kit.KUSTOMIZATIONS}


@pytest.fixture(scope="session")
def plain_manifests() -> dict[str, list[dict[str, Any]]]:
    return kit.load_plain_manifests()


@pytest.fixture(scope="session")
def dockerfile() -> kit.Dockerfile:
    return kit.parse_dockerfile(kit.ROOT / "Dockerfile")


@pytest.fixture(scope="session")
def settings_env_names() -> set[str]:
    return kit.settings_env_names()


@pytest.fixture(scope="session")
def service_routes() -> kit.ServiceRoutes:
    return kit.read_service_routes()


@pytest.fixture(scope="session")
def metric_families() -> dict[str, str]:
    return kit.read_metric_families()


@pytest.fixture
def load_settings(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], Any]:
    """``load_settings({"DETECT_PORT": "8000", ...})``: `Settings` built from exactly these variables."""
    from service.settings import Settings

    prefix = kit.settings_env_prefix()

    def load(env: dict[str, str]) -> Settings:
        for key in list(os.environ):
            if key.upper().startswith(prefix):
                monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return Settings()

    return load

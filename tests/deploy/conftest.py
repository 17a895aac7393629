"""Fixtures for the deployment tests (k8s/, Dockerfile); the helpers live in `deploy_testkit`."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _register_testkit() -> None:
    """Make ``import deploy_testkit`` work under ``--import-mode=importlib`` (see tests/service/conftest)."""
    if "deploy_testkit" in sys.modules:
        return
    path = Path(__file__).with_name("deploy_testkit.py")
    spec = importlib.util.spec_from_file_location("deploy_testkit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["deploy_testkit"] = module
    spec.loader.exec_module(module)


_register_testkit()

import deploy_testkit as kit  # noqa: E402 - registered just above


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

"""Fixtures for the service tests; the builders and helpers they use live in `service_testkit`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_testkit import (
    GatedFactory,
    add_toy_model,
    encode,
    make_settings,
    solid_image,
    start_client,
)

from service.app import create_app


@pytest.fixture(scope="session")
def toy_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with one model, ``toy`` version 1: 64x64 stretch."""
    repo = tmp_path_factory.mktemp("toy_repo")
    add_toy_model(repo, "toy")
    return repo


@pytest.fixture(scope="session")
def multi_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Several models: stretch (default, two versions), letterbox 48x64, masks, fixed batch 4."""
    repo = tmp_path_factory.mktemp("multi_repo")
    add_toy_model(repo, "a-stretch", "1")
    add_toy_model(repo, "a-stretch", "2")
    add_toy_model(repo, "letterbox", height=48, width=64, resize="letterbox")
    add_toy_model(repo, "masks", mask_size=(8, 8))
    add_toy_model(repo, "fixed", batch=4)
    (repo / "default").write_text("a-stretch\n")
    return repo


@pytest.fixture
def png_of() -> Callable[[int], bytes]:
    """A 64x64 PNG of one grey level: the toy model's first score is then ``value / 255``."""
    return lambda value: encode(solid_image(value))


@pytest.fixture
def gated() -> GatedFactory:
    return GatedFactory()


@pytest.fixture
def make_client(gated: GatedFactory) -> Iterator[Callable[..., TestClient]]:
    """``make_client(repo, **settings)``: a started TestClient over gated real backends."""
    clients: list[TestClient] = []

    def make(repo: Path, **overrides: object) -> TestClient:
        client = start_client(create_app(make_settings(repo, **overrides), backend_factory=gated))
        for backend in gated.backends.values():
            backend.calls.clear()
            backend.entered.clear()
            backend.gate = threading.Event()
            backend.gate.set()
        clients.append(client)
        return client

    yield make
    for client in clients:
        for backend in gated.backends.values():
            backend.gate.set()
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient], toy_repo: Path) -> TestClient:
    """A started app serving the single-model toy repository."""
    return make_client(toy_repo)

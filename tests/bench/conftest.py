"""Fixtures for the benchmark tests: the service's toy model repository (builders: `service_testkit`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from service_testkit import add_toy_model


@pytest.fixture(scope="session")
def toy_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with one model, ``toy`` version 1: 64x64 stretch."""
    repo = tmp_path_factory.mktemp("toy_repo")
    add_toy_model(repo, "toy")
    return repo

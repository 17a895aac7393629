"""`bench.server.local_server`: a real `detect-serve` on 127.0.0.1, ready when yielded, gone after."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from bench.server.local_server import local_server, single_model_repository


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


def test_serves_the_one_model_and_stops(toy_repo: Path) -> None:
    with (
        single_model_repository(toy_repo / "toy") as repo,
        local_server(repo, {"DETECT_DEFAULT_MODEL": "toy"}) as server,
    ):
        assert server.url.startswith("http://127.0.0.1:")
        models = httpx.get(f"{server.url}/v1/models", timeout=10).json()
        assert models["default_model"] == "toy"
        assert [m["name"] for m in models["models"]] == ["toy"]
        assert _alive(server.pid)
        pid = server.pid
    assert not _alive(pid)
    assert not repo.exists()


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="detect-serve exited: "), local_server(tmp_path / "missing"):
        pass

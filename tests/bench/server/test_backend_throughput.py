"""`bench.server.backend_throughput.resolve_entry`: the raw pipeline and the peer servers run a model on the
runtime's defaults, not on the service's per-model serving.json."""

from __future__ import annotations

from pathlib import Path

import pytest
from service_testkit import add_toy_model

from bench.server.backend_throughput import resolve_entry
from service.runtime.repository import SERVING_FILE
from service.settings import ModelOverride


@pytest.mark.parametrize("where", ["repository", "model folder"])
def test_the_serving_file_is_left_out(tmp_path: Path, where: str) -> None:
    add_toy_model(tmp_path, "toy")
    (tmp_path / "toy" / SERVING_FILE).write_text('{"openvino_streams": 2, "decode_in_batch": true}')
    entry = resolve_entry(tmp_path if where == "repository" else tmp_path / "toy")
    assert (entry.name, entry.version) == ("toy", "1")
    assert entry.serving == ModelOverride()

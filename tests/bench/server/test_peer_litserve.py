"""`bench.server.peer_litserve`: the LitServe peer answers ``POST /detect`` with the bare app's detections
(`pipeline_batch`, what `bench.server.bare_server` answers), alone and in a batch of two."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.server.backend_throughput import pipeline_batch, resolve_entry
from bench.server.local_server import free_port
from service.runtime.backends import create_backend
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "models" / "efficientdet-d0-synth-int8" / "1"
SAMPLES = ROOT / "service" / "static" / "samples"
READY_TIMEOUT_S = 120.0


def _bare_answers(groups: list[list[bytes]]) -> list[list[dict[str, Any]]]:
    """What the bare app's pipeline answers for each group of images inferred as one batch (in this
    process): the model's scores move a little with the batch size."""
    entry = resolve_entry(MODEL)
    settings = Settings()
    backend = create_backend(entry, settings)
    try:
        return [[json.loads(body) for body in pipeline_batch(backend, entry, g, settings)] for g in groups]
    finally:
        backend.close()


def _differences(answer: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """How ``answer`` differs from ``expected``: header, labels, boxes beyond 1 px, scores beyond 1e-3."""
    header = ("model", "version", "width", "height")
    if [answer[k] for k in header] != [expected[k] for k in header]:
        return [f"header {[answer[k] for k in header]} != {[expected[k] for k in header]}"]
    got, want = answer["detections"], expected["detections"]
    if [d["label"] for d in got] != [d["label"] for d in want]:
        return [f"labels {[d['label'] for d in got]} != {[d['label'] for d in want]}"]
    out = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if abs(g["score"] - w["score"]) > 1e-3:
            out.append(f"detection {i}: score {g['score']} != {w['score']}")
        if any(abs(g["box"][side] - w["box"][side]) > 1.0 for side in ("x1", "y1", "x2", "y2")):
            out.append(f"detection {i}: box {g['box']} != {w['box']}")
    return out


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            pytest.fail(f"peer_litserve exited with {process.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    pytest.fail(f"peer_litserve not ready after {READY_TIMEOUT_S:g} s: {log.read_text()[-2000:]}")


@pytest.mark.slow  # starts LitServe's processes and loads the model twice
def test_answers_what_the_bare_app_answers(tmp_path: Path) -> None:
    images = [(SAMPLES / name).read_bytes() for name in ("shapes-1.jpg", "shapes-4.jpg")]
    alone_1, alone_2, together_expected = _bare_answers([[images[0]], [images[1]], images])
    expected_alone = [alone_1[0], alone_2[0]]
    assert expected_alone[0]["detections"]  # the comparison means something only with something to find
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "peer_litserve.log"
    module = "bench.server.peer_litserve"
    # A batch timeout long enough that the two concurrent requests below form one batch.
    options = ["--model", str(MODEL), "--port", str(port), "--batch-timeout", "0.5"]
    with log.open("wb") as out:
        # A session of its own, so that whatever of LitServe's processes outlives it can be found and stopped.
        process = subprocess.Popen(
            [sys.executable, "-m", module, *options],
            cwd=tmp_path,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        _wait_ready(process, url, log)

        def detect(data: bytes) -> httpx.Response:
            return httpx.post(
                f"{url}/detect", content=data, headers={"content-type": "image/jpeg"}, timeout=30
            )

        alone = detect(images[0])
        assert alone.status_code == 200, alone.text
        assert alone.headers["content-type"] == "application/json"
        assert not _differences(alone.json(), expected_alone[0])

        with ThreadPoolExecutor(2) as pool:
            together = list(pool.map(detect, images))
        assert [r.status_code for r in together] == [200, 200], [r.text for r in together]
        answers = [r.json() for r in together]
        # One batch of two (what the batch timeout is for), or, if the second came too late, two of one.
        as_batch = [d for a, e in zip(answers, together_expected, strict=True) for d in _differences(a, e)]
        as_singles = [d for a, e in zip(answers, expected_alone, strict=True) for d in _differences(a, e)]
        assert not as_batch or not as_singles, f"as one batch: {as_batch}; one by one: {as_singles}"

        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 200
        assert not (tmp_path / "client.py").exists()  # LitServe's client file is not written
    finally:
        left = _stop(process)
    assert not left, "processes of the server still ran 10 s after SIGTERM to its main process"


def _stop(process: subprocess.Popen[bytes]) -> bool:
    """SIGTERM to the main process (as bench_request_path stops its servers), then SIGKILL to whatever of
    its session is left: whether anything was."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return True

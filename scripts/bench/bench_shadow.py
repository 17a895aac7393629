"""What a shadow copy costs the served requests: the same sequential ``POST /detect`` requests with no
rollout and with a rollout copying every request to a candidate (``shadow_percent`` 100), in interleaved
rounds, in one process, on one shipped model served as version 1 and (the same files) version 2.

Two figures per configuration: the median end-to-end latency (sequential requests through the ASGI app,
so the server's own work is all that is timed: with a shadow, the copies run in the background and share
the CPU with the next request) and the time of the shadow's own work on the request path (the draw and
starting the task: `ShadowRunner.wants` and `ShadowRunner.start`), timed around those calls. Each round of
the shadowed app waits for its copies to finish before the next round starts. Appends one line per run to
``docs/results/shadow.jsonl``.

    .venv/bin/python scripts/bench/bench_shadow.py --model efficientdet-d0-synth --rounds 5 --requests 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.pipeline.shadow import ShadowRunner
from service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "service/static/samples").glob("shapes-*.jpg"))


class _Timed:
    """Adds up the time spent in ShadowRunner.wants and ShadowRunner.start."""

    def __init__(self) -> None:
        self.seconds = 0.0
        for name in ("wants", "start"):
            original = getattr(ShadowRunner, name)

            def timed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - started

            setattr(ShadowRunner, name, timed)


def _repository(model: str, root: Path) -> Path:
    source = REPO / "models" / model / "1"
    for version in ("1", "2"):
        target = root / model / version
        target.mkdir(parents=True)
        for item in source.iterdir():
            manifest = item.read_text() if item.name == "manifest.json" else None
            if manifest is not None:  # the version is the folder's
                data = json.loads(manifest)
                data["version"] = version
                (target / item.name).write_text(json.dumps(data))
            else:
                os.link(item, target / item.name)
    return root


def _round(client: TestClient, model: str, requests: int) -> list[float]:
    times = []
    for i in range(requests):
        body = SAMPLES[i % len(SAMPLES)].read_bytes()
        started = time.perf_counter()
        response = client.post(f"/detect?model={model}", content=body, headers={"content-type": "image/jpeg"})
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        assert response.json()["version"] == "1"
    return times


def _drain(client: TestClient) -> None:
    app: Any = client.app
    shadow: ShadowRunner = app.state.pipeline.shadow
    deadline = time.monotonic() + 60
    while shadow.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="efficientdet-d0-synth")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    timer = _Timed()
    with tempfile.TemporaryDirectory() as work:
        root = _repository(args.model, Path(work) / "models")
        settings = Settings(model_repository=root, repository_api=True, access_log=False, versions="latest")
        results: dict[str, dict[str, list[float]]] = {"off": {}, "shadow": {}}
        # Both apps start with version 1 alone (version 2's folder is put back once they serve); the
        # rollout then loads version 2 as the candidate of one of them.
        (root / args.model / "2").rename(Path(work) / "candidate")
        with TestClient(create_app(settings)) as off, TestClient(create_app(settings)) as shadowed:
            (Path(work) / "candidate").rename(root / args.model / "2")
            plan = {"candidate": "2", "shadow_percent": 100}
            response = shadowed.post(f"/v2/repository/models/{args.model}/rollout", json=plan)
            assert response.status_code == 200, response.text
            for client in (off, shadowed):  # warm-up
                _round(client, args.model, 6)
                _drain(client)
            for _ in range(args.rounds):
                for name, client in (("off", off), ("shadow", shadowed)):
                    timer.seconds = 0.0
                    times = _round(client, args.model, args.requests)
                    path_us = timer.seconds / args.requests * 1e6
                    _drain(client)
                    results[name].setdefault("p50_ms", []).append(statistics.median(times) * 1000)
                    results[name].setdefault("path_us", []).append(path_us)
            copies = {
                line.split('result="')[1].split('"')[0]: float(line.split()[-1])
                for line in shadowed.get("/metrics").text.splitlines()
                if line.startswith(f'detect_shadow_requests_total{{model="{args.model}",result=')
            }
    row = {
        "model": args.model,
        "rounds": args.rounds,
        "requests": args.requests,
        "off_p50_ms": round(statistics.median(results["off"]["p50_ms"]), 2),
        "shadow_p50_ms": round(statistics.median(results["shadow"]["p50_ms"]), 2),
        "shadow_path_us": round(statistics.median(results["shadow"]["path_us"]), 1),
        "off_rounds_p50_ms": [round(x, 2) for x in results["off"]["p50_ms"]],
        "shadow_rounds_p50_ms": [round(x, 2) for x in results["shadow"]["p50_ms"]],
        "shadow_copies": {k: v for k, v in copies.items() if v},  # warm-up included
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with (REPO / "docs" / "results" / "shadow.jsonl").open("a") as handle:
        handle.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()

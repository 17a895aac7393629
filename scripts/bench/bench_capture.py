"""What sample capture costs a request: the same requests with capture off and on (random share 1.0, so
every image is captured and written), in interleaved rounds on one shipped model, in one process;
and "decide-only" (every image chosen, then all but one dropped by the rate limit), which separates the
request path's own work from the writer thread's (which shares the CPU with inference).

Two figures per configuration: the median end-to-end latency of ``POST /detect`` (sequential requests
through the ASGI app, so the server's own work is all that is timed), and the time of capture's own work
on the request path (taking the candidates, applying the rules, enqueueing), timed around those calls.

    .venv/bin/python scripts/bench/bench_capture.py --model efficientdet-d0-synth-int8 --rounds 5 \
        --requests 60
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.capture.recorder import Candidates, SampleCapture
from service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "service/static/samples").glob("shapes-*.jpg"))


class _TimedContext:
    """A context manager whose entering and leaving add to ``timer.seconds``."""

    def __init__(self, timer: _Timed, inner: AbstractContextManager[Candidates]):
        self.timer, self.inner = timer, inner

    def __enter__(self) -> Candidates:
        started = time.perf_counter()
        value = self.inner.__enter__()
        self.timer.seconds += time.perf_counter() - started
        return value

    def __exit__(self, *exc: Any) -> None:
        started = time.perf_counter()
        self.inner.__exit__(*exc)
        self.timer.seconds += time.perf_counter() - started


class _Timed:
    """Adds up the time spent in SampleCapture.candidates (entering and leaving) and Candidates.offer."""

    def __init__(self) -> None:
        self.seconds = 0.0
        original_candidates, original_offer = SampleCapture.candidates, Candidates.offer

        def candidates(capture: SampleCapture, data: Any) -> AbstractContextManager[Candidates]:
            started = time.perf_counter()
            inner = original_candidates(capture, data)
            self.seconds += time.perf_counter() - started
            return _TimedContext(self, inner)

        def offer(held: Candidates, *args: Any) -> None:
            started = time.perf_counter()
            original_offer(held, *args)
            self.seconds += time.perf_counter() - started

        SampleCapture.candidates = candidates  # type: ignore[assignment,method-assign]
        Candidates.offer = offer  # type: ignore[method-assign]


def run_round(config: str, args: argparse.Namespace, timer: _Timed) -> tuple[float, float, int]:
    """(median request seconds, capture seconds per request, images captured) of one round."""
    with tempfile.TemporaryDirectory() as repo, tempfile.TemporaryDirectory() as out:
        (Path(repo) / args.model).symlink_to((REPO / "models" / args.model).resolve())
        overrides: dict[str, Any] = {}
        if config != "off":
            overrides = {
                "capture_dir": Path(out),
                "capture_random_share": 1.0,
                # "decide-only": every image is chosen, the rate limit drops all but the first: the
                # request path's work without the writer's.
                "capture_max_per_minute": 1_000_000 if config == "on" else 1,
                "capture_queue": 1024,
            }
        settings = Settings(
            model_repository=Path(repo), default_model=args.model, access_log=False, **overrides
        )
        bodies = [path.read_bytes() for path in SAMPLES]
        with TestClient(create_app(settings)) as client:
            assert client.portal is not None
            client.portal.call(client.app.state.runtime.wait_loaded)  # type: ignore[attr-defined]
            for body in bodies:  # warm-up
                client.post("/detect", content=body, headers={"content-type": "image/jpeg"})
            timer.seconds = 0.0
            times = []
            for i in range(args.requests):
                started = time.perf_counter()
                response = client.post(
                    "/detect", content=bodies[i % len(bodies)], headers={"content-type": "image/jpeg"}
                )
                times.append(time.perf_counter() - started)
                assert response.status_code == 200, response.text
            spent = timer.seconds / args.requests
            captured = client.get("/v1/captures").json()["images"]
        return statistics.median(times), spent, captured


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="efficientdet-d0-synth-int8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    timer = _Timed()
    results: dict[str, list[tuple[float, float, int]]] = {"off": [], "decide-only": [], "on": []}
    for _ in range(args.rounds):
        for config in results:
            results[config].append(run_round(config, args, timer))
    print(f"model {args.model}, {args.rounds} rounds x {args.requests} sequential requests, median of rounds")
    print(
        "| capture | request p50 (ms) | capture's work on the request path (us per request) "
        "| images written per round (3 warm-up included) |"
    )
    print("|---|---|---|---|")
    for config, rows in results.items():
        p50 = statistics.median(r[0] for r in rows) * 1000
        own = statistics.median(r[1] for r in rows) * 1e6
        captured = statistics.median(r[2] for r in rows)
        print(f"| {config} | {p50:.2f} | {own:.1f} | {captured:.0f} |")


if __name__ == "__main__":
    main()

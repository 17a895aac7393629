"""The interactive client of ``detect-bench streams``: ``POST /detect`` of a sample image every 0.25 s, in
a process of its own, so that its latencies do not include the benchmark's own threads (the cameras'
server and the event readers share one interpreter lock).

`start_probe` starts it for a window of wall-clock time and returns a future of its `Probe`; each answer's
``Server-Timing`` header is kept, so a row can say where an interactive request's time went on the
server (its queue wait behind stream frames, its inference beside them).

Imports no torch; needs httpx (the ``bench`` extra).
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

INTERVAL_S = 0.25


@dataclass
class Probe:
    """What one window of interactive requests got: (status, client milliseconds) and server stages."""

    answers: list[tuple[int, float]] = field(default_factory=list)
    stages: list[dict[str, float]] = field(default_factory=list)  # Server-Timing of each 200, ms

    @property
    def ok_ms(self) -> np.ndarray:
        return np.array([ms for code, ms in self.answers if code == 200])

    def p(self, q: float) -> float | None:
        ok = self.ok_ms
        return round(float(np.percentile(ok, q)), 1) if ok.size else None

    def stage_p50(self) -> dict[str, float]:
        """Each Server-Timing stage's median over the answers, milliseconds."""
        names = sorted({name for stages in self.stages for name in stages})
        return {
            name: round(float(np.median([s[name] for s in self.stages if name in s])), 2) for name in names
        }


def parse_server_timing(value: str) -> dict[str, float]:
    """``decode;dur=1.234, total;dur=9.8`` -> {"decode": 1.234, "total": 9.8}; entries without dur are
    skipped."""
    stages: dict[str, float] = {}
    for entry in value.split(","):
        name, _, params = entry.strip().partition(";")
        for param in params.split(";"):
            key, _, number = param.strip().partition("=")
            if key == "dur" and name:
                stages[name] = float(number)
    return stages


def probe(url: str, model: str, image: bytes, start_at: float, end_at: float) -> Probe:
    """From ``start_at`` to ``end_at`` (``time.time()``), one request every `INTERVAL_S`."""
    import httpx

    result = Probe()
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/health/live")  # the connection is open before the window
        time.sleep(max(0.0, start_at - time.time()))
        while time.time() < end_at:
            started = time.perf_counter()
            try:
                response = client.post(
                    "/detect", params={"model": model}, content=image, headers={"content-type": "image/jpeg"}
                )
                code = response.status_code
            except httpx.HTTPError:
                code, response = 0, None
            result.answers.append((code, 1000 * (time.perf_counter() - started)))
            if response is not None and code == 200:
                result.stages.append(parse_server_timing(response.headers.get("server-timing", "")))
            time.sleep(max(0.0, INTERVAL_S - (time.perf_counter() - started)))
    return result


def start_probe(url: str, model: str, image: bytes, start_at: float, end_at: float) -> Future[Probe]:
    """`probe` in a fresh process (spawned: nothing of this one's threads is copied)."""
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    future = pool.submit(probe, url, model, image, start_at, end_at)
    pool.shutdown(wait=False)
    return future

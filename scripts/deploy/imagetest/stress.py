"""What is asked of the running container under stress: memory under load against the pod's limit, and
the drain when SIGTERM arrives with requests in flight (the other checks: `imagetest.checks`).

Every check raises ``StepFailed`` naming its step (limit, drain) and what it saw."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import httpx
import numpy as np

from imagetest.checks import Endpoints, Figures
from imagetest.container import Container
from imagetest.pod import PodRuntime
from imagetest.steps import check

# Concurrent clients and requests each for the load that the peak memory is measured under.
LOAD_CLIENTS = 8
LOAD_REQUESTS_PER_CLIENT = 6
# Requests in flight when SIGTERM arrives: each a multipart of DRAIN_IMAGES images of DRAIN_SIZE pixels.
DRAIN_REQUESTS = 6
DRAIN_IMAGES = 8
DRAIN_SIZE = (1280, 960)


# ------------------------------------------------------------------------------------------------ limit


def load(ends: Endpoints, container: Container, images: list[bytes]) -> int:
    """LOAD_CLIENTS clients posting images concurrently (some as multipart batches); all must be
    answered 200. Returns the highest RSS sampled meanwhile."""
    sampler = _RssSampler(container)
    sampler.start()

    def client(index: int) -> list[int]:
        statuses = []
        with httpx.Client(timeout=60, headers=ends.auth) as session:
            for number in range(LOAD_REQUESTS_PER_CLIENT):
                if (index + number) % 3 == 0:
                    files = [("images", (f"{i}.jpg", image, "image/jpeg")) for i, image in enumerate(images)]
                    statuses.append(session.post(ends.http + "/detect", files=files).status_code)
                else:
                    image = images[(index + number) % len(images)]
                    statuses.append(
                        session.post(
                            ends.http + "/detect", content=image, headers={"Content-Type": "image/jpeg"}
                        ).status_code
                    )
        return statuses

    try:
        with ThreadPoolExecutor(LOAD_CLIENTS) as pool:
            statuses = [s for result in pool.map(client, range(LOAD_CLIENTS)) for s in result]
    finally:
        sampler.stop()
    failed = [s for s in statuses if s != 200]
    check(
        not failed,
        "request",
        f"under load {len(failed)} of {len(statuses)} requests failed: {sorted(set(failed))}",
    )
    return sampler.peak


class _RssSampler(threading.Thread):
    def __init__(self, container: Container):
        super().__init__(daemon=True)
        self.pid = container.pid()
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
            except OSError:
                return
            self.done.wait(0.05)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


def memory_bound(ends: Endpoints) -> float | None:
    """The server's own peak-memory bound (detect_memory_bound_bytes), if it reports one."""
    text = httpx.get(ends.metrics + "/metrics", timeout=10).text
    match = re.search(r"^detect_memory_bound_bytes ([0-9.e+]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def limits(runtime: PodRuntime, container: Container, figures: Figures) -> None:
    limit = runtime.memory_limit_bytes
    loaded = figures.loaded
    assert loaded is not None and figures.idle is not None
    check(not container.oom_killed() and container.running(), "limit", "the container was OOM-killed")
    check(
        loaded.cgroup_limit is None or loaded.cgroup_limit == limit,
        "limit",
        f"the container's memory cgroup limit is {loaded.cgroup_limit}, not the pod's {limit}",
    )
    for what, value in (
        ("idle RSS", figures.idle.rss),
        ("peak RSS (VmHWM)", loaded.rss_peak),
        ("cgroup peak usage", loaded.cgroup_peak or 0),
    ):
        check(
            value < limit,
            "limit",
            f"{what} {value / 2**20:.0f} MiB is not under the pod's limit {limit / 2**20:.0f} MiB",
        )
    if figures.memory_bound is not None:
        check(
            figures.memory_bound <= limit,
            "limit",
            f"the server's memory bound {figures.memory_bound / 2**20:.0f} MiB exceeds "
            f"the pod's limit {limit / 2**20:.0f} MiB",
        )


# ------------------------------------------------------------------------------------------------ drain


def drain(
    runtime: PodRuntime, container: Container, ends: Endpoints, images: list[bytes], figures: Figures
) -> None:
    """The kubelet's stop: the preStop hook, then SIGTERM with requests in flight. Every request sent before
    the signal must be answered 200, and the server must exit 0 within the grace period."""
    if runtime.pre_stop:
        code = container.exec(*runtime.pre_stop, timeout=runtime.grace_period_s)
        check(code == 0, "drain", f"the preStop hook {runtime.pre_stop} exited {code} in the container")
    big = _enlarged(images)
    files = [("images", (f"{i}.jpg", image, "image/jpeg")) for i, image in enumerate(big)]

    def send(_: int) -> str:
        try:
            response = httpx.post(
                ends.http + "/detect", files=files, headers=ends.auth, timeout=runtime.grace_period_s
            )
        except httpx.HTTPError as error:
            return type(error).__name__
        ok = response.status_code == 200 and len(response.json().get("results", response.json())) > 0
        return str(response.status_code) if ok or response.status_code != 200 else "200 without results"

    pool = ThreadPoolExecutor(DRAIN_REQUESTS)
    futures = [pool.submit(send, i) for i in range(DRAIN_REQUESTS)]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        figures.drain_in_flight = _in_flight(ends)
        if figures.drain_in_flight >= DRAIN_REQUESTS // 2:
            break
        time.sleep(0.02)
    signalled = time.monotonic()
    container.signal("TERM")
    figures.drain_answered = [future.result() for future in futures]
    pool.shutdown()
    budget = runtime.grace_period_s - (5 if runtime.pre_stop else 0)
    exited = container.wait_exit(budget)
    figures.drain_exit_s = None if exited is None else time.monotonic() - signalled
    check(
        figures.drain_in_flight > 0,
        "drain",
        "no request was in flight when SIGTERM was sent: nothing was tested",
    )
    failed = [status for status in figures.drain_answered if status != "200"]
    check(
        not failed,
        "drain",
        f"{len(failed)} of {DRAIN_REQUESTS} requests in flight at SIGTERM failed: {failed}",
    )
    check(
        exited is not None,
        "drain",
        f"the server still ran {budget} s after SIGTERM (the kubelet would SIGKILL it)",
    )
    figures.exit_code = container.exit_code()
    check(
        figures.exit_code == 0,
        "drain",
        f"the server exited {figures.exit_code} after SIGTERM:\n{container.logs()}",
    )


def _enlarged(images: list[bytes]) -> list[bytes]:
    out = []
    for index in range(DRAIN_IMAGES):
        pixels = cv2.imdecode(np.frombuffer(images[index % len(images)], np.uint8), cv2.IMREAD_COLOR)
        assert pixels is not None
        ok, encoded = cv2.imencode(".jpg", cv2.resize(pixels, DRAIN_SIZE), [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append(encoded.tobytes())
    return out


def _in_flight(ends: Endpoints) -> int:
    try:
        text = httpx.get(ends.metrics + "/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0
    match = re.search(r"^detect_in_flight_requests ([0-9.e+]+)$", text, re.MULTILINE)
    return int(float(match.group(1))) if match else 0

"""What is asked of the running container: its probes and its APIs (memory against the limit and the
drain: `imagetest.stress`).

Every check raises ``StepFailed`` naming its step (probe, request) and what it saw."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import httpx
import numpy as np
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from imagetest.container import Container, Memory
from imagetest.pod import PodRuntime, Probe
from imagetest.steps import StepFailed, check

HOST = "127.0.0.1"


@dataclass
class Endpoints:
    http: str
    metrics: str
    grpc: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"X-API-Key": self.key}


@dataclass
class Figures:
    """What the run measured; printed at the end."""

    start_to_ready_s: float = 0.0
    idle: Memory | None = None
    loaded: Memory | None = None
    load_rss_max: int = 0
    memory_bound: float | None = None
    drain_in_flight: int = 0
    drain_answered: list[str] = field(default_factory=list)
    drain_exit_s: float | None = None
    exit_code: int | None = None


def endpoints(container: Container, runtime: PodRuntime, key: str) -> Endpoints:
    def url(port_name: str) -> str:
        return f"{HOST}:{container.host_port(runtime.ports[port_name])}"

    return Endpoints(
        http=f"http://{url('http')}", metrics=f"http://{url('metrics')}", grpc=url("grpc"), key=key
    )


def _probe_ok(base: str, probe: Probe) -> tuple[bool, str]:
    """One kubelet-style httpGet probe: success is a status in 200..399 within timeoutSeconds."""
    try:
        response = httpx.get(base + probe.path, timeout=probe.timeout_s)
    except httpx.HTTPError as error:
        return False, f"{type(error).__name__}"
    return 200 <= response.status_code < 400, str(response.status_code)


# ------------------------------------------------------------------------------------------------ probe


def wait_started(container: Container, runtime: PodRuntime, base: str, started: float) -> float:
    """Polls the startupProbe until it passes; fails when the container exits or the probe's budget
    (failureThreshold x periodSeconds) runs out. Returns seconds from `podman run` to ready."""
    probe = runtime.probes["startupProbe"]
    budget = probe.failure_threshold * probe.period_s
    last = "no answer"
    while time.monotonic() - started < budget:
        if not container.running():
            if container.oom_killed():
                raise StepFailed(
                    "limit",
                    f"the container was OOM-killed before its startupProbe passed: the pod's memory limit "
                    f"{runtime.memory_limit_bytes / 2**20:.0f} MiB does not hold the server while it starts",
                )
            raise StepFailed(
                "probe",
                f"the container exited with code {container.exit_code()} before its startupProbe passed; "
                f"its log ends:\n{container.logs()}",
            )
        ok, last = _probe_ok(base, probe)
        if ok:
            return time.monotonic() - started
        time.sleep(0.25)
    raise StepFailed("probe", f"startupProbe {probe.path} not passed within {budget:.0f} s (last: {last})")


def probes(runtime: PodRuntime, base: str) -> None:
    for kind in ("readinessProbe", "livenessProbe"):
        probe = runtime.probes[kind]
        ok, seen = _probe_ok(base, probe)
        check(ok, "probe", f"{kind} GET {probe.path} answered {seen} (timeout {probe.timeout_s:.0f} s)")


# ---------------------------------------------------------------------------------------------- request


def load_images(folder: Path, count: int) -> list[bytes]:
    files = sorted(folder.glob("*.jpg"))[:count]
    if len(files) < count:
        raise RuntimeError(f"{folder} holds {len(files)} JPEGs, {count} needed")
    return [path.read_bytes() for path in files]


def detect_json(ends: Endpoints, image: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        ends.http + "/detect",
        content=image,
        headers={"Content-Type": "image/jpeg", **(ends.auth if headers is None else headers)},
        timeout=60,
    )


def requests(ends: Endpoints, images: list[bytes]) -> dict[str, object]:
    """/detect (JSON, boxed), the keys, /metrics, the web page and gRPC. Returns the first JSON answer."""
    for headers, what in (({}, "without a key"), ({"X-API-Key": "not-a-key"}, "with a wrong key")):
        status = detect_json(ends, images[0], headers).status_code
        check(status == 401, "request", f"POST /detect {what} answered {status}, not 401")

    response = detect_json(ends, images[0])
    check(
        response.status_code == 200,
        "request",
        f"POST /detect answered {response.status_code}: {response.text[:300]}",
    )
    body: dict[str, object] = response.json()
    check(bool(body.get("detections")), "request", f"POST /detect found nothing on a synthetic scene: {body}")

    boxed = httpx.post(
        ends.http + "/detect",
        content=images[0],
        headers={"Content-Type": "image/jpeg", "Accept": "image/jpeg", **ends.auth},
        timeout=60,
    )
    check(
        boxed.status_code == 200 and boxed.headers.get("content-type", "").startswith("image/jpeg"),
        "request",
        f"POST /detect (Accept: image/jpeg) answered {boxed.status_code} {boxed.headers.get('content-type')}",
    )
    drawn = cv2.imdecode(np.frombuffer(boxed.content, np.uint8), cv2.IMREAD_COLOR)
    original = cv2.imdecode(np.frombuffer(images[0], np.uint8), cv2.IMREAD_COLOR)
    assert original is not None
    check(
        drawn is not None and drawn.shape == original.shape,
        "request",
        f"the boxed image does not decode to the input's size {original.shape}",
    )

    page = httpx.get(ends.http + "/", timeout=10)
    check(
        page.status_code == 200 and "<html" in page.text.lower(),
        "request",
        f"GET / (web page) answered {page.status_code} {page.headers.get('content-type')}",
    )
    _grpc(ends, images[0], body)
    metrics = httpx.get(ends.metrics + "/metrics", timeout=10)
    check(
        metrics.status_code == 200,
        "request",
        f"GET /metrics on the metrics port answered {metrics.status_code}",
    )
    served = re.findall(r'^detect_requests_total\{.*code="200".*\} ([0-9.e+]+)$', metrics.text, re.MULTILINE)
    check(
        bool(served) and sum(map(float, served)) >= 2,
        "request",
        "/metrics does not count the requests served",
    )
    not_ready = re.findall(r"^detect_model_ready\{.*\} 0\.0$", metrics.text, re.MULTILINE)
    check(not not_ready, "request", f"/metrics reports models not ready: {not_ready}")
    return body


def _grpc(ends: Endpoints, image: bytes, http_body: dict[str, object]) -> None:
    """Open Inference Protocol over gRPC: the key as metadata, the same top detection as /detect."""
    client = triton_grpc.InferenceServerClient(ends.grpc)
    try:
        check(client.is_server_ready(headers={"x-api-key": ends.key}), "request", "gRPC ServerReady is false")
        tensor = triton_grpc.InferInput("image_bytes", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[image]], dtype=np.object_))
        model = str(http_body["model"])
        try:
            client.infer(model, [tensor], client_timeout=30)
        except InferenceServerException as error:
            check("UNAUTHENTICATED" in str(error.status()), "request", f"gRPC without a key: {error}")
        else:
            raise StepFailed("request", "gRPC ModelInfer without a key was answered")
        result = client.infer(model, [tensor], headers={"x-api-key": ends.key}, client_timeout=30)
        scores, classes = result.as_numpy("detection_scores"), result.as_numpy("detection_classes")
        check(scores is not None and classes is not None, "request", "gRPC ModelInfer returned no detections")
        assert scores is not None and classes is not None
        detections = http_body["detections"]
        assert isinstance(detections, list)
        best = max(detections, key=lambda d: float(d["score"]))
        grpc_best = int(np.argmax(scores[0]))
        check(
            int(classes[0, grpc_best]) == int(best["class_id"])
            and abs(float(scores[0, grpc_best]) - best["score"]) < 0.02,
            "request",
            f"gRPC's top detection (class {int(classes[0, grpc_best])}, "
            f"score {float(scores[0, grpc_best]):.3f}) "
            f"is not /detect's (class {best['class_id']}, score {best['score']})",
        )
    finally:
        client.close()

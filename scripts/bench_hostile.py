"""Hostile-input suite and overload run against a live ``detect-serve`` on loopback; prints a Markdown table.

    .venv/bin/python scripts/bench_hostile.py --model-repository models [--port 0] [--env KEY=VALUE ...]
        [--cases all|name,name] [--overload-clients 24 --overload-seconds 20] [--json out.json]

The script starts the server itself (``sys.executable -m service.cli --host 127.0.0.1 --port P``, with the
``--env`` variables added to its environment and its log in a temporary file), waits for
``GET /health/ready`` == 200, then runs the cases one after another, each as an attacker would:

- ``lying-jpeg``: one JPEG whose SOF header claims 6000x6000 but whose scan holds 64x64 pixels;
- ``png-16x40mpx``: 16 single-colour 6324x6324 PNGs in one multipart request (field ``images``);
- ``lying-jpeg-16``: 16 lying JPEGs in one multipart request;
- ``many-parts``: one ~19.9 MB multipart body of ~349,000 one-byte parts;
- ``stalled-body``: Content-Length 20,000,000, 1 MB sent, then silence (waits up to 20 s for an answer);
- ``held-bodies``: 20 connections each sending 19.5 MB of a declared 20 MB body, then holding;
- ``no-body-connections``: 50 connections sending POST /detect headers (Content-Length 1000) and no body,
  while ``detect_in_flight_requests`` is read from ``/metrics``;
- ``empty-classes``: a valid JPEG to ``/detect?classes=,,,``;
- ``overload``: N closed-loop clients posting 320x320 synthetic JPEGs for D seconds;
- ``sigterm-stalled-upload`` (always last: it stops the server): an upload stalls mid-body, the server gets
  SIGTERM; measures the time until the process exits and what the stalled client received.

During each case a thread samples the server's VmRSS every 20 ms, another probes ``/health/ready`` and
``/health/live`` (3 s timeout), and one normal request (a small valid JPEG, POST /detect) starts 0.3 s in.
Network failures are recorded as statuses (``timeout``, ``reset``, ``closed``, ``refused``), never raised.
Only 127.0.0.1 is used; every loop is bounded in count and time, every socket has a timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np

HOST = "127.0.0.1"
PROJECT = Path(__file__).resolve().parent.parent
SNIPPET_CHARS = 160
PROBE_TIMEOUT_S = 3.0
PROBE_INTERVAL_S = 0.1
NORMAL_DELAY_S = 0.3
NORMAL_TIMEOUT_S = 30.0
RSS_INTERVAL_S = 0.02
AFTER_DELAY_S = 2.0
READY_TIMEOUT_S = 180.0
EXIT_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
MAX_REPLY_BYTES = 64 * 1024
MONITOR_MAX_S = 600.0  # no monitor thread outlives this, whatever happens


# ---------------------------------------------------------------------------------------------- records


@dataclass
class Reply:
    """One answer (or failure): ``status`` is the HTTP code as text, or timeout/reset/closed/refused/..."""

    status: str
    seconds: float
    body: str = ""
    content_type: str = ""
    retry_after: str | None = None


@dataclass
class Outcome:
    """What a case function reports; ``seconds`` is the case latency as that case defines it."""

    sent: str
    replies: list[Reply]
    seconds: float | None
    extra: dict[str, Any] = field(default_factory=dict)
    after_delay_s: float = AFTER_DELAY_S
    note: str = ""


@dataclass
class CaseReport:
    name: str
    sent: str
    statuses: dict[str, int]
    snippet: str
    note: str
    case_s: float | None
    normal: Reply | None
    probe_ready_max_s: float | None
    probe_live_max_s: float | None
    probe_statuses: dict[str, dict[str, int]]
    rss_before_mb: float | None
    rss_peak_mb: float | None
    rss_after_mb: float | None
    replies: list[Reply]
    extra: dict[str, Any]


# ------------------------------------------------------------------------------------------------ images


def synthetic_image(rng: np.random.Generator, size: int) -> np.ndarray:
    """A ``size`` x ``size`` BGR image: a flat background with a few coloured rectangles and circles."""
    image = np.full((size, size, 3), rng.integers(0, 256, 3), dtype=np.uint8)
    for _ in range(int(rng.integers(2, 6))):
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        x, y = (int(v) for v in rng.integers(0, size - size // 4, 2))
        extent = int(rng.integers(size // 10, size // 3))
        if rng.random() < 0.5:
            cv2.rectangle(image, (x, y), (x + extent, y + extent), colour, -1)
        else:
            cv2.circle(image, (x + extent // 2, y + extent // 2), extent // 2, colour, -1)
    return image


def encode(image: np.ndarray, ext: str) -> bytes:
    ok, data = cv2.imencode(ext, image)
    if not ok:
        raise RuntimeError(f"cv2 could not encode {ext}")
    return data.tobytes()


def patch_jpeg_size(data: bytes, height: int, width: int) -> bytes:
    """``data`` with its start-of-frame header claiming ``height`` x ``width`` (the scan is unchanged)."""
    out = bytearray(data)
    pos = 2  # after SOI
    while pos + 4 <= len(out) and out[pos] == 0xFF:
        marker = out[pos + 1]
        length = int.from_bytes(out[pos + 2 : pos + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            out[pos + 5 : pos + 7] = height.to_bytes(2, "big")
            out[pos + 7 : pos + 9] = width.to_bytes(2, "big")
            return bytes(out)
        pos += 2 + length
    raise RuntimeError("no SOF0/1/2 segment found in the encoded JPEG")


def lying_jpeg(rng: np.random.Generator, claimed: int = 6000) -> bytes:
    """A 64x64 random-noise JPEG whose SOF says ``claimed`` x ``claimed``."""
    noise = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    return patch_jpeg_size(encode(noise, ".jpg"), claimed, claimed)


def many_parts_body(target_bytes: int, boundary: str = "b") -> tuple[bytes, int]:
    """A multipart body of one-byte ``images`` parts, as many as fit in ``target_bytes``."""
    part = f'--{boundary}\r\nContent-Disposition: form-data; name="images"\r\n\r\nx\r\n'.encode()
    closing = f"--{boundary}--\r\n".encode()
    count = (target_bytes - len(closing)) // len(part)
    return part * count + closing, count


@dataclass
class Payloads:
    normal_jpeg: bytes
    overload_jpegs: list[bytes]
    lying: list[bytes]
    png_40mpx: bytes


def make_payloads() -> Payloads:
    rng = np.random.default_rng(0)
    png = encode(np.full((6324, 6324, 3), (40, 120, 200), dtype=np.uint8), ".png")
    return Payloads(
        normal_jpeg=encode(synthetic_image(rng, 160), ".jpg"),
        overload_jpegs=[encode(synthetic_image(rng, 320), ".jpg") for _ in range(8)],
        lying=[lying_jpeg(rng) for _ in range(16)],
        png_40mpx=png,
    )


# -------------------------------------------------------------------------------------------- transport


def classify(exc: BaseException) -> str:
    """A short label for a network failure."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "timeout"
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return "refused"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "closed"
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return "reset"
        seen = seen.__cause__ or seen.__context__
    return f"error:{type(exc).__name__}"


def snippet(data: bytes) -> str:
    return data[:SNIPPET_CHARS].decode("utf-8", "replace").replace("\n", " ").replace("\r", "")


def http_call(
    method: str, url: str, *, timeout: float, client: httpx.Client | None = None, **kwargs: Any
) -> Reply:
    """One HTTP exchange as a `Reply`; never raises for network trouble."""
    started = time.monotonic()
    try:
        if client is not None:
            response = client.request(method, url, timeout=timeout, **kwargs)
        else:
            response = httpx.request(method, url, timeout=timeout, **kwargs)
    except (httpx.HTTPError, OSError) as exc:
        return Reply(classify(exc), time.monotonic() - started)
    return Reply(
        str(response.status_code),
        time.monotonic() - started,
        snippet(response.content),
        response.headers.get("content-type", ""),
        response.headers.get("retry-after"),
    )


def open_raw(port: int) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=CONNECT_TIMEOUT_S)


def raw_head(ctx: Ctx, path: str, content_length: int, content_type: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {HOST}:{ctx.server.port}",
        f"Content-Type: {content_type}",
        f"Content-Length: {content_length}",
        *(f"{key}: {value}" for key, value in ctx.auth.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _head_end(buf: bytes | bytearray) -> int:
    return buf.find(b"\r\n\r\n")


def _header(head: bytes, name: bytes) -> bytes | None:
    match = re.search(rb"\r\n" + name + rb":[ \t]*([^\r]*)", head, re.IGNORECASE)
    return match.group(1).strip() if match else None


def _response_complete(buf: bytearray) -> bool:
    end = _head_end(buf)
    if end < 0:
        return False
    head = bytes(buf[:end])
    if b"chunked" in (_header(head, b"transfer-encoding") or b"").lower():
        return buf.endswith(b"0\r\n\r\n")
    length = _header(head, b"content-length")
    return length is not None and length.isdigit() and len(buf) - end - 4 >= int(length)


def dechunk(body: bytes) -> bytes:
    """The payload of a chunked body (best effort: stops at the first malformed chunk)."""
    out = bytearray()
    pos = 0
    for _ in range(10_000):
        line_end = body.find(b"\r\n", pos)
        try:
            size = int(body[pos:line_end].split(b";")[0], 16) if line_end >= 0 else 0
        except ValueError:
            break
        if size == 0:
            break
        out += body[line_end + 2 : line_end + 2 + size]
        pos = line_end + 2 + size + 2
    return bytes(out)


def parse_raw(buf: bytes, failure: str | None, seconds: float) -> Reply:
    end = _head_end(buf)
    if end < 0:
        status = failure or "closed"
        return Reply(status if not buf else f"partial-{status}", seconds, snippet(buf))
    head = buf[:end]
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    status = parts[1] if len(parts) > 1 else f"bad-status-line:{status_line[:30]}"
    body = buf[end + 4 :]
    if b"chunked" in (_header(head, b"transfer-encoding") or b"").lower():
        body = dechunk(body)
    content_type = (_header(head, b"content-type") or b"").decode("latin-1")
    retry_after = _header(head, b"retry-after")
    return Reply(
        status, seconds, snippet(body), content_type, retry_after.decode("latin-1") if retry_after else None
    )


def read_reply(sock: socket.socket, timeout: float) -> Reply:
    """Read one HTTP response from a raw socket within ``timeout`` seconds."""
    started = time.monotonic()
    deadline = started + timeout
    buf = bytearray()
    failure: str | None = None
    while len(buf) < MAX_REPLY_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            failure = "timeout"
            break
        try:
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
        except OSError as exc:
            failure = classify(exc)
            break
        if not chunk:
            failure = "closed"
            break
        buf += chunk
        if _response_complete(buf):
            break
    return parse_raw(bytes(buf), failure, time.monotonic() - started)


def replies_of(socks: list[socket.socket | None], errors: list[str | None], timeout: float) -> list[Reply]:
    """For each held connection: its answer if one is waiting, else ``no-answer`` (or its send error)."""
    live = [s for s in socks if s is not None]
    try:
        readable = set(select.select(live, [], [], 0)[0]) if live else set()
    except (OSError, ValueError):
        readable = set()
    replies = []
    for sock, error in zip(socks, errors, strict=True):
        if sock is not None and sock in readable:
            replies.append(read_reply(sock, timeout))
        else:
            replies.append(Reply(f"send-{error}" if error else "no-answer", 0.0))
    return replies


def close_all(socks: list[socket.socket | None]) -> None:
    for sock in socks:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


# ------------------------------------------------------------------------------------------------ server


class Server:
    """The ``detect-serve`` subprocess on 127.0.0.1."""

    def __init__(self, model_repository: Path, port: int, env: dict[str, str], log_path: Path):
        self.model_repository = model_repository.resolve()
        self.port = port if port else free_port()
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self) -> list[str]:
        repository = str(self.model_repository)
        module = [sys.executable, "-m", "service.cli"]
        return [*module, "--model-repository", repository, "--host", HOST, "--port", str(self.port)]

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=PROJECT,
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            if http_call("GET", self.url("/health/ready"), timeout=PROBE_TIMEOUT_S).status == "200":
                return True
            time.sleep(0.25)
        return False

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def wait_exit(self, timeout: float) -> float | None:
        """Seconds until the process exited, or None if it still runs after ``timeout``."""
        assert self.process is not None
        started = time.monotonic()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - started

    def stop(self, timeout: float = EXIT_TIMEOUT_S) -> float | None:
        """SIGTERM, then SIGKILL after ``timeout``; the seconds until exit after SIGTERM (None: killed)."""
        if not self.alive():
            return 0.0
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        seconds = self.wait_exit(timeout)
        if seconds is None:
            self.process.kill()
            self.process.wait(timeout=10)
        return seconds

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Ctx:
    server: Server
    args: argparse.Namespace
    payloads: Payloads
    auth: dict[str, str]
    metrics_port: int | None

    def url(self, path: str) -> str:
        return self.server.url(path)


def ensure_server(ctx: Ctx) -> str:
    """Restart the server if an earlier case killed it; a note saying so (empty if it was fine)."""
    if ctx.server.alive():
        return ""
    code = ctx.server.process.returncode if ctx.server.process else None
    ctx.server.restarts += 1
    ctx.server.start()
    ready = ctx.server.wait_ready(READY_TIMEOUT_S)
    return f"server had exited ({code}); restarted" + ("" if ready else ", not ready")


# ---------------------------------------------------------------------------------------------- monitors


def read_rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Monitor(threading.Thread):
    """A daemon thread looping ``tick`` every ``interval`` s until stopped (bounded by MONITOR_MAX_S)."""

    def __init__(self, interval: float):
        super().__init__(daemon=True)
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + MONITOR_MAX_S
        while not self.stopped.is_set() and time.monotonic() < deadline:
            if not self.tick():
                return
            self.stopped.wait(self.interval)

    def tick(self) -> bool:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=PROBE_TIMEOUT_S * 2 + 1)


class RssSampler(Monitor):
    def __init__(self, pid: int):
        super().__init__(RSS_INTERVAL_S)
        self.pid = pid
        self.peak: float | None = None

    def tick(self) -> bool:
        rss = read_rss_mb(self.pid)
        if rss is None:
            return False  # the process is gone
        self.peak = rss if self.peak is None else max(self.peak, rss)
        return True


class ProbeSampler(Monitor):
    def __init__(self, ctx: Ctx):
        super().__init__(PROBE_INTERVAL_S)
        self.ctx = ctx
        self.samples: dict[str, list[Reply]] = {"ready": [], "live": []}

    def tick(self) -> bool:
        for name in self.samples:
            reply = http_call("GET", self.ctx.url(f"/health/{name}"), timeout=PROBE_TIMEOUT_S)
            self.samples[name].append(reply)
        return True

    def max_s(self, name: str) -> float | None:
        return max((r.seconds for r in self.samples[name]), default=None)

    def statuses(self) -> dict[str, dict[str, int]]:
        return {name: dict(Counter(r.status for r in replies)) for name, replies in self.samples.items()}


class NormalRequest(threading.Thread):
    """One valid detect request, sent NORMAL_DELAY_S after the thread starts."""

    def __init__(self, ctx: Ctx):
        super().__init__(daemon=True)
        self.ctx = ctx
        self.reply: Reply | None = None

    def run(self) -> None:
        time.sleep(NORMAL_DELAY_S)
        headers = {"Content-Type": "image/jpeg", **self.ctx.auth}
        self.reply = http_call(
            "POST",
            self.ctx.url("/detect"),
            timeout=NORMAL_TIMEOUT_S,
            content=self.ctx.payloads.normal_jpeg,
            headers=headers,
        )


# ------------------------------------------------------------------------------------------------- cases


def post(ctx: Ctx, path: str, timeout: float, **kwargs: Any) -> Reply:
    headers = {**kwargs.pop("headers", {}), **ctx.auth}
    return http_call("POST", ctx.url(path), timeout=timeout, headers=headers, **kwargs)


def case_lying_jpeg(ctx: Ctx) -> Outcome:
    data = ctx.payloads.lying[0]
    reply = post(ctx, "/detect", 60.0, content=data, headers={"Content-Type": "image/jpeg"})
    return Outcome(f"1 JPEG, SOF 6000x6000, 64x64 scan ({len(data)} B)", [reply], reply.seconds)


def _multipart(ctx: Ctx, images: list[bytes], name: str, media_type: str, sent: str) -> Outcome:
    files = [("images", (f"{i}.{name}", data, media_type)) for i, data in enumerate(images)]
    reply = post(ctx, "/detect", 120.0, files=files)
    return Outcome(f"{sent} ({sum(map(len, images)) / 1e6:.2f} MB)", [reply], reply.seconds)


def case_png_16(ctx: Ctx) -> Outcome:
    images = [ctx.payloads.png_40mpx] * 16
    return _multipart(ctx, images, "png", "image/png", "16 single-colour 6324x6324 PNGs, multipart")


def case_lying_jpeg_16(ctx: Ctx) -> Outcome:
    return _multipart(
        ctx, ctx.payloads.lying, "jpg", "image/jpeg", "16 lying JPEGs (6000x6000 SOF), multipart"
    )


def case_many_parts(ctx: Ctx) -> Outcome:
    body, count = many_parts_body(19_900_000)
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    reply = post(ctx, "/detect", 120.0, content=body, headers=headers)
    sent = f"multipart, {count:,} one-byte parts ({len(body) / 1e6:.2f} MB)"
    return Outcome(sent, [reply], reply.seconds, extra={"parts": count, "body_bytes": len(body)})


def case_stalled_body(ctx: Ctx) -> Outcome:
    sent = "Content-Length 20,000,000; 1 MB sent, then silence (wait 20 s)"
    sock: socket.socket | None = None
    try:
        sock = open_raw(ctx.server.port)
        sock.settimeout(20.0)
        sock.sendall(raw_head(ctx, "/detect", 20_000_000, "image/jpeg") + b"\0" * 1_000_000)
        reply = read_reply(sock, 20.0)
    except OSError as exc:
        reply = Reply(f"send-{classify(exc)}", 0.0)
    finally:
        close_all([sock])
    return Outcome(sent, [reply], reply.seconds, note="latency: from the last byte sent")


def _send_held(
    ctx: Ctx, payload: bytes, index: int, socks: list[socket.socket | None], errors: list[str | None]
) -> None:
    """Open connection ``index``, send headers declaring 20 MB and then ``payload``; store socket or error."""
    try:
        sock = open_raw(ctx.server.port)
    except OSError as exc:
        errors[index] = classify(exc)
        return
    socks[index] = sock
    try:
        sock.settimeout(30.0)  # the total for sendall (Python >= 3.5), not per chunk
        sock.sendall(raw_head(ctx, "/detect", 20_000_000, "image/jpeg"))
        sock.sendall(payload)
    except OSError as exc:
        errors[index] = classify(exc)


def case_held_bodies(ctx: Ctx) -> Outcome:
    payload = b"\0" * 19_500_000
    socks: list[socket.socket | None] = [None] * 20
    errors: list[str | None] = [None] * 20
    started = time.monotonic()
    threads = [
        threading.Thread(target=_send_held, args=(ctx, payload, i, socks, errors), daemon=True)
        for i in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=45.0)
    sent_s = time.monotonic() - started
    time.sleep(2.0)  # hold them
    replies = replies_of(list(socks), list(errors), 1.0)
    close_all(socks)
    sent = "20 conns x 19.5 MB of a declared 20 MB body, held 2 s, then closed"
    return Outcome(sent, replies, sent_s, after_delay_s=3.0, note="latency: until all bodies were sent")


def read_in_flight(ctx: Ctx) -> tuple[float | None, Reply]:
    """``detect_in_flight_requests`` from /metrics (None if unreadable) and how that read went."""
    port = ctx.metrics_port or ctx.server.port
    started = time.monotonic()
    try:
        response = httpx.get(f"http://{HOST}:{port}/metrics", timeout=PROBE_TIMEOUT_S, headers=ctx.auth)
    except httpx.HTTPError as exc:
        return None, Reply(classify(exc), time.monotonic() - started)
    reply = Reply(str(response.status_code), time.monotonic() - started)
    match = re.search(r"^detect_in_flight_requests(?:\{[^}]*\})?\s+(\S+)$", response.text, re.MULTILINE)
    try:
        return (float(match.group(1)) if match else None), reply
    except ValueError:
        return None, reply


def case_no_body_connections(ctx: Ctx) -> Outcome:
    started = time.monotonic()
    socks: list[socket.socket | None] = [None] * 50
    errors: list[str | None] = [None] * 50
    for index in range(50):
        try:
            sock = socks[index] = open_raw(ctx.server.port)
            sock.sendall(raw_head(ctx, "/detect", 1000, "image/jpeg"))
        except OSError as exc:
            errors[index] = classify(exc)
    time.sleep(1.0)
    in_flight, metrics_reply = read_in_flight(ctx)
    elapsed = time.monotonic() - started
    replies = replies_of(socks, errors, 1.0)
    close_all(socks)
    sent = "50 conns: POST /detect headers (Content-Length 1000), no body; held ~1 s"
    shown = "?" if in_flight is None else f"{in_flight:g}"
    read = f"/metrics {metrics_reply.status} in {fmt_s(metrics_reply.seconds)}"
    note = f"detect_in_flight_requests={shown} ({read})"
    extra = {"in_flight_requests": in_flight, "metrics": asdict(metrics_reply)}
    return Outcome(sent, replies, elapsed, extra=extra, note=note)


def case_empty_classes(ctx: Ctx) -> Outcome:
    data = ctx.payloads.normal_jpeg
    reply = post(ctx, "/detect?classes=,,,", 30.0, content=data, headers={"Content-Type": "image/jpeg"})
    return Outcome("valid JPEG to /detect?classes=,,,", [reply], reply.seconds)


def _overload_client(ctx: Ctx, end: float, out: list[Reply], seed: int) -> None:
    """One closed-loop client: post, wait for the answer, post again, until ``end`` (bounded count)."""
    jpegs = ctx.payloads.overload_jpegs
    headers = {"Content-Type": "image/jpeg", **ctx.auth}
    with httpx.Client(timeout=NORMAL_TIMEOUT_S) as client:
        for i in range(200_000):
            if time.monotonic() >= end:
                return
            data = jpegs[(seed + i) % len(jpegs)]
            reply = http_call(
                "POST",
                ctx.url("/detect"),
                timeout=NORMAL_TIMEOUT_S,
                client=client,
                content=data,
                headers=headers,
            )
            reply.body = reply.body if not reply.status.startswith("2") else ""
            out.append(reply)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def summarize_overload(replies: list[Reply], clients: int, seconds: float) -> dict[str, Any]:
    ok = [r.seconds for r in replies if r.status == "200"]
    rejected = [r for r in replies if r.status == "429"]
    rejected_s = [r.seconds for r in rejected]
    return {
        "clients": clients,
        "seconds": seconds,
        "statuses": dict(Counter(r.status for r in replies)),
        "ok_per_s": len(ok) / seconds if seconds else None,
        "ok_p50_s": percentile(ok, 50),
        "ok_p99_s": percentile(ok, 99),
        "r429_max_s": max(rejected_s, default=None),
        "r429_p99_s": percentile(rejected_s, 99),
        "r429_with_retry_after": sum(1 for r in rejected if r.retry_after is not None),
        "r429_count": len(rejected),
    }


def case_overload(ctx: Ctx) -> Outcome:
    clients, duration = ctx.args.overload_clients, ctx.args.overload_seconds
    outs: list[list[Reply]] = [[] for _ in range(clients)]
    started = time.monotonic()
    end = started + duration
    threads = [
        threading.Thread(target=_overload_client, args=(ctx, end, outs[i], i), daemon=True)
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, end - time.monotonic()) + NORMAL_TIMEOUT_S + 5)
    elapsed = time.monotonic() - started
    replies = [reply for out in outs for reply in list(out)]
    summary = summarize_overload(replies, clients, elapsed)
    sent = f"{clients} closed-loop clients x {duration:g} s, 320x320 JPEGs"
    raw = [[r.status, round(r.seconds, 4), r.retry_after] for r in replies]
    return Outcome(sent, replies, elapsed, extra={"summary": summary, "raw": raw})


def case_sigterm(ctx: Ctx) -> Outcome:
    """Stall an upload mid-body, SIGTERM the server, time its exit and read what the stalled client got."""
    sent = "upload stalls (Content-Length 1,000,000; 1000 B sent), then SIGTERM"
    holder: list[Reply] = []
    try:
        sock = open_raw(ctx.server.port)
        sock.sendall(raw_head(ctx, "/detect", 1_000_000, "image/jpeg") + b"\xff" * 1000)
    except OSError as exc:
        return Outcome(sent, [Reply(f"send-{classify(exc)}", 0.0)], None, after_delay_s=0.0)
    time.sleep(0.2)
    reader = threading.Thread(target=lambda: holder.append(read_reply(sock, EXIT_TIMEOUT_S + 5)), daemon=True)
    reader.start()
    assert ctx.server.process is not None
    ctx.server.process.send_signal(signal.SIGTERM)
    exit_s = ctx.server.wait_exit(EXIT_TIMEOUT_S)
    note = f"exit {ctx.server.process.returncode} after {exit_s:.2f} s" if exit_s is not None else ""
    if exit_s is None:
        ctx.server.process.kill()
        ctx.server.process.wait(timeout=10)
        note = f"still running {EXIT_TIMEOUT_S:g} s after SIGTERM: killed"
    reader.join(timeout=10.0)
    close_all([sock])
    reply = holder[0] if holder else Reply("no-reply", 0.0)
    extra = {"exit_s": exit_s, "exit_code": ctx.server.process.returncode, "stalled_client": asdict(reply)}
    got = f"{reply.status} {reply.content_type or '(no content-type)'}"
    note += f"; stalled client got {got} after {fmt_s(reply.seconds)}"
    return Outcome(sent, [reply], exit_s, extra=extra, after_delay_s=0.0, note=note)


CASES: dict[str, Callable[[Ctx], Outcome]] = {
    "lying-jpeg": case_lying_jpeg,
    "png-16x40mpx": case_png_16,
    "lying-jpeg-16": case_lying_jpeg_16,
    "many-parts": case_many_parts,
    "stalled-body": case_stalled_body,
    "held-bodies": case_held_bodies,
    "no-body-connections": case_no_body_connections,
    "empty-classes": case_empty_classes,
    "overload": case_overload,
    "sigterm-stalled-upload": case_sigterm,
}
STOPS_SERVER = "sigterm-stalled-upload"


# ----------------------------------------------------------------------------------------------- running


def pick_snippet(replies: list[Reply]) -> str:
    """The body of the first non-200 answer that has one, else of the first answer."""
    for reply in replies:
        if reply.status != "200" and reply.body:
            return reply.body
    return replies[0].body if replies else ""


def run_case(ctx: Ctx, name: str) -> CaseReport:
    """Run one case with the RSS sampler, the probes and one normal request alongside."""
    restart_note = ensure_server(ctx)
    pid = ctx.server.pid
    before = read_rss_mb(pid)
    monitors: list[Monitor] = [RssSampler(pid), ProbeSampler(ctx)]
    normal = NormalRequest(ctx)
    for thread in [*monitors, normal]:
        thread.start()
    started = time.monotonic()
    try:
        outcome = CASES[name](ctx)
    except Exception as exc:  # the bench must report, not crash
        outcome = Outcome("(bench error)", [Reply(f"bench-error:{type(exc).__name__}: {exc}", 0.0)], None)
        outcome.seconds = time.monotonic() - started
    normal.join(timeout=NORMAL_DELAY_S + NORMAL_TIMEOUT_S + 5)
    for monitor in monitors:
        monitor.stop()
    rss, probes = monitors[0], monitors[1]
    assert isinstance(rss, RssSampler) and isinstance(probes, ProbeSampler)
    time.sleep(outcome.after_delay_s)
    return CaseReport(
        name=name,
        sent=outcome.sent,
        statuses=dict(Counter(r.status for r in outcome.replies)),
        snippet=pick_snippet(outcome.replies),
        note="; ".join(n for n in (restart_note, outcome.note) if n),
        case_s=outcome.seconds,
        normal=normal.reply,
        probe_ready_max_s=probes.max_s("ready"),
        probe_live_max_s=probes.max_s("live"),
        probe_statuses=probes.statuses(),
        rss_before_mb=before,
        rss_peak_mb=rss.peak,
        rss_after_mb=read_rss_mb(pid),
        replies=outcome.replies if name != "overload" else [],
        extra=outcome.extra,
    )


# ---------------------------------------------------------------------------------------------- printing


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def fmt_mb(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def fmt_probes(report: CaseReport) -> str:
    text = f"ready {fmt_s(report.probe_ready_max_s)} / live {fmt_s(report.probe_live_max_s)}"
    bad = {
        name: {status: n for status, n in counts.items() if status != "200"}
        for name, counts in report.probe_statuses.items()
    }
    failures = ", ".join(
        f"{name} {status} x{n}" for name, counts in bad.items() for status, n in counts.items()
    )
    return f"{text} ({failures})" if failures else text


def table_row(report: CaseReport) -> str:
    statuses = ", ".join(f"{status} x{n}" for status, n in sorted(report.statuses.items()))
    if report.snippet:
        statuses += f": `{report.snippet[:110]}`"
    if report.note:
        statuses += f" — {report.note}"
    normal = "–" if report.normal is None else f"{report.normal.status} in {fmt_s(report.normal.seconds)}"
    rss = " / ".join(fmt_mb(v) for v in (report.rss_before_mb, report.rss_peak_mb, report.rss_after_mb))
    cells = [report.name, report.sent, statuses, fmt_s(report.case_s), normal, fmt_probes(report), rss]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def overload_line(summary: dict[str, Any]) -> str:
    statuses = ", ".join(f"{status} x{n}" for status, n in sorted(summary["statuses"].items()))
    ok_rate = summary["ok_per_s"]
    return (
        f"**overload**: {summary['clients']} clients for {summary['seconds']:.1f} s: {statuses}; "
        f"200s {'–' if ok_rate is None else f'{ok_rate:.2f}'}/s, p50 {fmt_s(summary['ok_p50_s'])}, "
        f"p99 {fmt_s(summary['ok_p99_s'])}; 429 max {fmt_s(summary['r429_max_s'])}, "
        f"p99 {fmt_s(summary['r429_p99_s'])}; Retry-After on "
        f"{summary['r429_with_retry_after']}/{summary['r429_count']} 429s"
    )


def print_table(reports: list[CaseReport]) -> None:
    print(
        "| case | sent | status (counts) | case latency | normal request meanwhile | probes max "
        "| RSS before / peak / after (MB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for report in reports:
        print(table_row(report))
    for report in reports:
        if report.name == "overload" and "summary" in report.extra:
            print()
            print(overload_line(report.extra["summary"]))


# ------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0, help="port for the server (0: a free one)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="server env (repeat)")
    parser.add_argument("--cases", default="all", help=f"all, or a comma list of: {', '.join(CASES)}")
    parser.add_argument("--overload-clients", type=int, default=24)
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--api-key", help="sent as X-API-Key with every request (for DETECT_API_KEYS)")
    parser.add_argument("--server-log", type=Path, help="server log file (default: a temporary file)")
    parser.add_argument("--json", type=Path, help="write every raw figure here")
    args = parser.parse_args(argv)
    if any("=" not in pair for pair in args.env):
        parser.error("--env takes KEY=VALUE")
    names = list(CASES) if args.cases == "all" else [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    args.case_names = [n for n in CASES if n in names]  # fixed order; the SIGTERM case last
    if not 1 <= args.overload_clients <= 512 or not 0 < args.overload_seconds <= 600:
        parser.error("--overload-clients must be 1..512 and --overload-seconds 0..600")
    return args


def make_server(args: argparse.Namespace) -> Server:
    env = dict(pair.split("=", 1) for pair in args.env)
    if args.server_log is not None:
        log_path = args.server_log
    else:
        handle, name = tempfile.mkstemp(prefix="bench_hostile_server_", suffix=".log")
        os.close(handle)
        log_path = Path(name)
    return Server(args.model_repository, args.port, env, log_path)


def baseline(ctx: Ctx) -> list[Reply]:
    """Three normal requests on the idle server, for comparison with the ones sent during cases."""
    headers = {"Content-Type": "image/jpeg", **ctx.auth}
    return [
        http_call(
            "POST",
            ctx.url("/detect"),
            timeout=NORMAL_TIMEOUT_S,
            content=ctx.payloads.normal_jpeg,
            headers=headers,
        )
        for _ in range(3)
    ]


def run_all(ctx: Ctx) -> dict[str, Any]:
    reports: list[CaseReport] = []
    idle = baseline(ctx)
    print(
        f"server pid {ctx.server.pid} on {HOST}:{ctx.server.port}, env {ctx.server.env or '{}'}; "
        f"idle normal request: {', '.join(f'{r.status} in {fmt_s(r.seconds)}' for r in idle)}",
        file=sys.stderr,
    )
    for name in ctx.args.case_names:
        print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
        report = run_case(ctx, name)
        print(f"    {table_row(report)}", file=sys.stderr, flush=True)
        reports.append(report)
    final_stop_s = ctx.server.stop() if ctx.server.alive() else None
    if final_stop_s is not None:
        print(f"server exited {fmt_s(final_stop_s)} after the final SIGTERM", file=sys.stderr)
    print()
    print_table(reports)
    return {
        "server": {
            "command": ctx.server.command(),
            "env": ctx.server.env,
            "log": str(ctx.server.log_path),
            "restarts": ctx.server.restarts,
            "final_sigterm_exit_s": final_stop_s,
        },
        "idle_normal_requests": [asdict(r) for r in idle],
        "cases": [asdict(r) for r in reports],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = make_server(args)
    metrics_port = server.env.get("DETECT_METRICS_PORT")
    auth = {"X-API-Key": args.api_key} if args.api_key else {}
    payloads = make_payloads()
    ctx = Ctx(server, args, payloads, auth, int(metrics_port) if metrics_port else None)
    server.start()
    try:
        if not server.wait_ready(READY_TIMEOUT_S):
            print(
                f"detect-serve did not become ready; log {server.log_path}:\n{server.log_tail()}",
                file=sys.stderr,
            )
            return 2
        results = run_all(ctx)
    finally:
        if server.alive():
            server.stop(timeout=10.0)
    print(f"\nserver log: {server.log_path}", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
        print(f"raw figures: {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

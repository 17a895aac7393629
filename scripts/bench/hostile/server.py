"""The ``detect-serve`` subprocess, the run context, and the monitors sampling it during a case."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hostile.common import (
    EXIT_TIMEOUT_S,
    HOST,
    MONITOR_MAX_S,
    NORMAL_DELAY_S,
    NORMAL_TIMEOUT_S,
    PROBE_INTERVAL_S,
    PROBE_TIMEOUT_S,
    PROJECT,
    READY_TIMEOUT_S,
    RSS_INTERVAL_S,
    Payloads,
    Reply,
)
from hostile.transport import http_call, raw_head

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

    def post_head(self, path: str, content_length: int, content_type: str) -> bytes:
        """The head of a raw POST to this server, with the API key when there is one."""
        return raw_head(self.server.port, self.auth, path, content_length, content_type)


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

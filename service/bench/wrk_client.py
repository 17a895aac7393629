"""Closed-loop load with ``wrk`` (C, epoll; Debian package ``wrk``, installed by
scripts/install-system-deps.sh): a client whose own CPU is small next to the server's, so that on a small
machine the server is measured and not the load client.

A generated Lua script makes every request ``POST /detect`` with the image as the body; its ``done`` hook
prints one JSON line with the counts and latency percentiles, which `parse_wrk_output` reads. wrk's own
CPU comes from ``wait4``'s resource usage of the finished process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

MARKER = "WRK_RESULT "

# The done hook: wrk's latencies are microseconds; errors.status counts answers that are not 2xx/3xx.
LUA_TEMPLATE = """\
wrk.method = "POST"
wrk.path = {path}
wrk.headers["Content-Type"] = {content_type}
local file = assert(io.open({body_file}, "rb"))
wrk.body = file:read("*a")
file:close()

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{marker}{{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50": %d, "p90": %d, "p99": %d, "mean": %f, "max": %d}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
"""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    ok: int  # requests without a socket error or a non-2xx/3xx status
    duration_s: float
    latency_ms: dict[str, float]  # p50, p90, p99, mean, max over all answers (wrk keeps no per-status split)
    errors: dict[str, int]  # connect, read, write, status (non-2xx/3xx answers), timeout
    cpu_user_s: float  # wrk's own CPU over its run
    cpu_system_s: float


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def lua_script(path: str, content_type: str, body_file: Path) -> str:
    return LUA_TEMPLATE.format(
        path=json.dumps(path),
        content_type=json.dumps(content_type),
        body_file=json.dumps(str(body_file)),
        marker=MARKER,
    )


def parse_wrk_output(stdout: str, cpu_user_s: float = 0.0, cpu_system_s: float = 0.0) -> WrkResult:
    """The `WrkResult` in wrk's output (the line the done hook prints)."""
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            raw = json.loads(line[len(MARKER) :])
            break
    else:
        raise ValueError(f"wrk printed no result line; its output was:\n{stdout}")
    errors = {key: int(raw[key]) for key in ("connect", "read", "write", "status", "timeout")}
    failed = errors["connect"] + errors["read"] + errors["write"] + errors["timeout"] + errors["status"]
    return WrkResult(
        requests=int(raw["requests"]),
        ok=max(0, int(raw["requests"]) - failed),
        duration_s=raw["duration_us"] / 1e6,
        latency_ms={key: float(raw[key]) / 1000 for key in ("p50", "p90", "p99", "mean", "max")},
        errors=errors,
        cpu_user_s=cpu_user_s,
        cpu_system_s=cpu_system_s,
    )


def run_wrk(
    url: str,
    image: bytes,
    content_type: str,
    *,
    concurrency: int,
    duration_s: float,
    model: str | None = None,
    threads: int = 1,
    timeout_s: float = 60.0,
) -> WrkResult:
    """``wrk`` with ``concurrency`` connections on ``threads`` threads for ``duration_s`` seconds, every
    request POSTing ``image`` to ``url``/detect."""
    if not wrk_available():
        raise FileNotFoundError(
            "wrk is not installed (Debian: apt-get install wrk; see scripts/install-system-deps.sh)"
        )
    path = "/detect" + (f"?{urlencode({'model': model})}" if model else "")
    base = urlsplit(url)
    with tempfile.TemporaryDirectory(prefix="detect-wrk-") as folder:
        body = Path(folder) / "body"
        body.write_bytes(image)
        script = Path(folder) / "post.lua"
        script.write_text(lua_script(path, content_type, body))
        command = [
            "wrk", f"-t{max(1, min(threads, concurrency))}", f"-c{concurrency}",
            f"-d{max(1, round(duration_s))}s", f"--timeout={max(1, round(timeout_s))}s",
            "-s", str(script), f"{base.scheme}://{base.netloc}",
        ]  # fmt: skip
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process:
            assert process.stdout is not None
            stdout = process.stdout.read()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"wrk exited with {process.returncode}:\n{stdout}")
    return parse_wrk_output(stdout, usage.ru_utime, usage.ru_stime)

"""Load with ``wrk`` (C, epoll; Debian package ``wrk``, installed by scripts/dev/install-system-deps.sh): a
client whose own CPU is small next to the server's, so that on a small machine the server is measured and not
the load client. Closed loop (`run_wrk`: connections back to back) and open loop (`run_wrk_open_loop`: Poisson
arrivals).

A generated Lua script makes every request ``POST /detect`` with the image as the body; its ``done`` hook
prints one JSON line with the counts and latency percentiles, which `parse_wrk_output` reads. wrk's own
CPU comes from ``wait4``'s resource usage of the finished process.

The open loop: wrk's Lua ``delay()`` hook is called before each request a connection sends. Each wrk thread
keeps its own Poisson schedule at ``rate / threads`` (merged, the threads' schedules are a Poisson process
at ``rate``): every call takes the thread's next arrival time and waits until it. Each connection holds the
next arrival it took, so with ``OPEN_LOOP_SECONDS_AHEAD`` seconds of arrivals' worth of connections a free
one is there when an arrival is due unless that many requests are in flight: a slow answer does not delay
the next send. When none is free the send is late, and the lateness is counted (mean, max and share of
late sends): wrk measures latency from the actual send, so a run with late sends says so instead of hiding
the wait (coordinated omission). More connections would sit idle between their arrivals past a server's
keep-alive timeout (uvicorn closes idle connections after 5 s), and wrk would count the closed ones as read
errors.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

MARKER = "WRK_RESULT "

# Every request POSTs the image (the body file) to the path.
POST_REQUEST = """\
wrk.method = "POST"
wrk.path = {path}
wrk.headers["Content-Type"] = {content_type}
local file = assert(io.open({body_file}, "rb"))
wrk.body = file:read("*a")
file:close()
"""

# The done hook: wrk's latencies are microseconds; errors.status counts answers that are not 2xx/3xx.
LUA_TEMPLATE = """\
{post}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{marker}{{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50": %d, "p90": %d, "p99": %d, "mean": %f, "max": %d}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
"""


# args: rate (requests/s over all threads), threads, seed. LuaJIT's ffi gives a monotonic clock in us.
OPEN_LOOP_TEMPLATE = """\
local ffi = require("ffi")
ffi.cdef[[
typedef struct {{ long tv_sec; long tv_nsec; }} wrk_timespec;
int clock_gettime(int clock_id, wrk_timespec *tp);
]]
local clock = ffi.new("wrk_timespec")
local function now_us()
  ffi.C.clock_gettime(1, clock)
  return tonumber(clock.tv_sec) * 1e6 + tonumber(clock.tv_nsec) / 1e3
end

{post}
local threads = {{}}
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  mean_gap_us = 1e6 * tonumber(args[2]) / tonumber(args[1])
  math.randomseed(tonumber(args[3]) * 1000 + id)
  next_us = nil
  claims, late, late_sum_ms, late_max_ms = 0, 0, 0.0, 0.0
end

function delay()
  local now = now_us()
  if next_us == nil then next_us = now end
  next_us = next_us - mean_gap_us * math.log(1 - math.random())
  claims = claims + 1
  local wait_ms = (next_us - now) / 1000
  if wait_ms < 0 then
    late = late + 1
    late_sum_ms = late_sum_ms - wait_ms
    if -wait_ms > late_max_ms then late_max_ms = -wait_ms end
    return 0
  end
  return wait_ms
end

done = function(summary, latency, requests)
  local c, l, s, m = 0, 0, 0.0, 0.0
  for _, thread in ipairs(threads) do
    c = c + thread:get("claims")
    l = l + thread:get("late")
    s = s + thread:get("late_sum_ms")
    m = math.max(m, thread:get("late_max_ms"))
  end
  local e = summary.errors
  io.write(string.format(
    '{marker}{{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50": %d, "p90": %d, "p99": %d, "mean": %f, "max": %d, ' ..
    '"claims": %d, "late": %d, "late_sum_ms": %f, "late_max_ms": %f}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max,
    c, l, s, m))
end
"""


# Open loop: connections for this many seconds of arrivals (4..256).
OPEN_LOOP_SECONDS_AHEAD = 2.0


@dataclass(frozen=True)
class WrkResult:
    requests: int
    ok: int  # requests without a socket error or a non-2xx/3xx status
    duration_s: float
    latency_ms: dict[str, float]  # p50, p90, p99, mean, max over all answers (wrk keeps no per-status split)
    errors: dict[str, int]  # connect, read, write, status (non-2xx/3xx answers), timeout
    cpu_user_s: float  # wrk's own CPU over its run
    cpu_system_s: float
    # Open loop only: arrivals taken from the schedule, those sent late, and their lateness in ms.
    arrivals: int = 0
    late: int = 0
    late_sum_ms: float = 0.0
    late_max_ms: float = 0.0


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def lua_script(path: str, content_type: str, body_file: Path, template: str = LUA_TEMPLATE) -> str:
    post = POST_REQUEST.format(
        path=json.dumps(path), content_type=json.dumps(content_type), body_file=json.dumps(str(body_file))
    )
    return template.format(post=post, marker=MARKER)


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
        arrivals=int(raw.get("claims", 0)),
        late=int(raw.get("late", 0)),
        late_sum_ms=float(raw.get("late_sum_ms", 0.0)),
        late_max_ms=float(raw.get("late_max_ms", 0.0)),
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
    threads = max(1, min(threads, concurrency))
    options = [f"-t{threads}", f"-c{concurrency}", f"-d{max(1, round(duration_s))}s"]
    return _run(url, image, content_type, model, options, timeout_s, LUA_TEMPLATE, [])


def run_wrk_open_loop(
    url: str,
    image: bytes,
    content_type: str,
    *,
    rate: float,
    duration_s: float,
    seed: int = 0,
    model: str | None = None,
    connections: int | None = None,
    threads: int = 1,
    timeout_s: float = 10.0,
) -> WrkResult:
    """POST ``image`` to ``url``/detect at Poisson times of ``rate`` per second (all threads together) for
    ``duration_s`` (whole) seconds, on ``connections`` connections (default: `OPEN_LOOP_SECONDS_AHEAD`
    seconds of arrivals, 4..256)."""
    if not rate > 0:
        raise ValueError(f"need rate > 0, got {rate}")
    if connections is None:
        connections = max(4, min(256, math.ceil(rate * OPEN_LOOP_SECONDS_AHEAD)))
    options = [f"-t{threads}", f"-c{max(connections, threads)}", f"-d{max(1, round(duration_s))}s"]
    arguments = [repr(rate), str(threads), str(seed)]
    return _run(url, image, content_type, model, options, timeout_s, OPEN_LOOP_TEMPLATE, arguments)


def _run(
    url: str,
    image: bytes,
    content_type: str,
    model: str | None,
    options: list[str],
    timeout_s: float,
    template: str,
    arguments: list[str],
) -> WrkResult:
    if not wrk_available():
        raise FileNotFoundError(
            "wrk is not installed (Debian: apt-get install wrk; see scripts/dev/install-system-deps.sh)"
        )
    path = "/detect" + (f"?{urlencode({'model': model})}" if model else "")
    base = urlsplit(url)
    with tempfile.TemporaryDirectory(prefix="detect-wrk-") as folder:
        body = Path(folder) / "body"
        body.write_bytes(image)
        script = Path(folder) / "post.lua"
        script.write_text(lua_script(path, content_type, body, template))
        command = [
            "wrk", *options, f"--timeout={max(1, round(timeout_s))}s", "-s", str(script),
            f"{base.scheme}://{base.netloc}", *(["--", *arguments] if arguments else []),
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

"""Hostile-input suite and overload run against a live ``detect-serve`` on loopback; prints a Markdown table.

    .venv/bin/python scripts/bench/bench_hostile.py --model-repository models [--port 0] [--env KEY=VALUE ...]
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
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hostile.cases import CASES
from hostile.common import (
    HOST,
    NORMAL_TIMEOUT_S,
    READY_TIMEOUT_S,
    CaseReport,
    Reply,
    fmt_s,
    make_payloads,
)
from hostile.report import print_table, run_case, table_row
from hostile.server import Ctx, Server
from hostile.transport import http_call

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

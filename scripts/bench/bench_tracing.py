"""What traces cost a request: the server with tracing off, on (OTLP/HTTP to a collector on loopback that
drops what it gets), and optionally the same code before tracing existed (``--baseline-tree``: another
checkout, e.g. ``git worktree add /tmp/before REV``), in interleaved rounds on one model.

Each round starts ``detect-serve`` on 127.0.0.1, runs ``detect-bench http`` against it (closed loop,
``--concurrency`` clients) and reads the server's CPU time from ``/proc``; the table gives each
configuration's median over the rounds: requests per second, p50 / p99 latency and server CPU per request.

    .venv/bin/python scripts/bench/bench_tracing.py --model efficientdet-d0-synth-int8 --rounds 3 \
        --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class _NullCollector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def run_round(config: str, args: argparse.Namespace, collector_port: int) -> dict[str, Any]:
    env = {**os.environ, "DETECT_DEFAULT_MODEL": args.model, "DETECT_ACCESS_LOG": "false"}
    if config == "on":
        env |= {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
        }
    if config == "before":
        env["PYTHONPATH"] = str(args.baseline_tree)
    with tempfile.TemporaryDirectory() as repo, tempfile.TemporaryDirectory() as out:
        (Path(repo) / args.model).symlink_to((args.repository / args.model).resolve())
        port = 18000 + os.getpid() % 1000
        server = subprocess.Popen(
            [str(BIN / "python"), "-m", "service.cli", "--model-repository", repo, "--port", str(port)],
            env=env,
            cwd=args.baseline_tree if config == "before" else REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(240):
                try:
                    if httpx.get(f"{url}/health/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            bench = [str(BIN / "detect-bench"), "http", "--url", url, "--images", str(args.image)]
            bench += ["--concurrency", str(args.concurrency), "--warmup", "0"]
            subprocess.run([*bench, "--duration", "2"], check=True, capture_output=True)  # warm-up
            cpu_before = _cpu_seconds(server.pid)  # the measured requests only, from here
            measured = ["--duration", str(args.duration), "--json", f"{out}/result.json"]
            subprocess.run([*bench, *measured], check=True, capture_output=True)
            cpu = _cpu_seconds(server.pid) - cpu_before
            result = json.loads(Path(f"{out}/result.json").read_text())
        finally:
            server.terminate()
            server.wait(timeout=60)
    requests = result["ok"]
    return {
        "config": config,
        "req_s": result["throughput_rps"],
        "p50_ms": result["latency_ms"]["p50"],
        "p99_ms": result["latency_ms"]["p99"],
        "cpu_ms_per_request": 1000 * cpu / max(1, requests),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="efficientdet-d0-synth-int8")
    parser.add_argument("--repository", type=Path, default=REPO / "models")
    parser.add_argument("--image", type=Path, default=REPO / "service/static/samples/shapes-1.jpg")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-tree", type=Path, default=None, help="a checkout before tracing")
    parser.add_argument("--out", type=Path, default=Path("runs/tracing.jsonl"))
    args = parser.parse_args(argv)
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _NullCollector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    configs = ["off", "on"] + (["before"] if args.baseline_tree else [])
    rows: list[dict[str, Any]] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for round_index in range(args.rounds):
        for config in configs:
            row = {"round": round_index, **run_round(config, args, collector.server_address[1])}
            print(json.dumps(row), flush=True)
            rows.append(row)
            with args.out.open("a") as out:
                out.write(json.dumps(row) + "\n")
    collector.shutdown()
    collector.server_close()
    print(f"\n{args.model}, concurrency {args.concurrency}, medians of {args.rounds} rounds")
    print("| tracing | req/s | p50 ms | p99 ms | server CPU ms / request |")
    print("|---|---|---|---|---|")
    for config in configs:
        mine = [r for r in rows if r["config"] == config]
        keys = ("req_s", "p50_ms", "p99_ms", "cpu_ms_per_request")
        cells = [statistics.median(r[k] for r in mine) for k in keys]
        print(f"| {config} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main()

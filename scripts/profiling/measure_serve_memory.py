"""The server's resident memory once every model is ready, per setting: one ``detect-serve`` per variant,
started on 127.0.0.1 with the variant's environment, read from /proc when /health/ready answers 200
(after warmup, before any request), then stopped.

    .venv/bin/python scripts/profiling/measure_serve_memory.py --model-repository models \
        --variants '{"default": {}, "2 streams": {"DETECT_OPENVINO_STREAMS": "2"}}' [--json FILE]

Compile the graphs once before comparing (a first start also fills the OpenVINO compile cache).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.server.local_server import local_server

READY_TIMEOUT_S = 600.0
SETTLE_S = 2.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def idle_rss(repository: Path, env: dict[str, str]) -> tuple[float, float]:
    """(seconds to ready, RSS in MiB once ready) of one server with ``env`` on top of this one's."""
    started = time.monotonic()
    with local_server(repository, env, ready_timeout_s=READY_TIMEOUT_S) as server:
        took = time.monotonic() - started
        time.sleep(SETTLE_S)
        return took, rss_mb(server.pid)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--variants", required=True, help='JSON: {"name": {"ENV": "value"}, ...}')
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    variants: dict[str, dict[str, str]] = json.loads(args.variants)
    rows = []
    for name, env in variants.items():
        took, rss = idle_rss(args.model_repository, env)
        rows.append({"variant": name, "env": env, "ready_s": round(took, 1), "idle_rss_mib": round(rss)})
        print(f"{name:40s} ready in {took:5.1f} s, idle RSS {rss:6.0f} MiB", flush=True)
    if args.json:
        figures = {"model_repository": str(args.model_repository), "rows": rows}
        args.json.write_text(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()

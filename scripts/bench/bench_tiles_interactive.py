"""A large tiled request beside single images: how long single images wait while tiles run (docs/tiling.md).

Starts ``detect-serve`` on 127.0.0.1 with one model and its default settings, then, in interleaved rounds:

- **idle:** one client posts a single image (``--image``, default the shapes sample) ``--requests`` times,
  one at a time;
- **beside tiles:** another client posts a large image with ``tiling=auto`` in a loop while the first posts
  the same single images; the single images' latencies are kept only while a tiled request was in flight.

Prints, per round and as medians over rounds, the single image's p50 / p90 idle and beside tiles, their
ratio, and the tiled requests' seconds and tile counts; ``--out`` appends the JSON rows (resumable by
``--label``: a label already in the file is not measured again).

    .venv/bin/python scripts/bench/bench_tiles_interactive.py --large data/large/val/000000000001.jpg \\
        --model efficientdet-d0-synth-int8 --rounds 3 --out runs/tiles-interactive.jsonl --label default
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.server.local_server import local_server, single_model_repository

REPO = Path(__file__).resolve().parents[2]


def _post(client: httpx.Client, url: str, data: bytes, **params: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = client.post(
        f"{url}/detect", params=params, content=data, headers={"Content-Type": "image/jpeg"}
    )
    response.raise_for_status()
    return time.perf_counter() - started, response.json()


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": ordered[len(ordered) // 2], "p90": ordered[int(len(ordered) * 0.9)], "n": len(ordered)}


def idle(url: str, single: bytes, requests: int) -> dict[str, float]:
    with httpx.Client(timeout=120) as client:
        _post(client, url, single)  # warm
        return _quantiles([_post(client, url, single)[0] for _ in range(requests)])


def beside_tiles(url: str, single: bytes, large: bytes, requests: int) -> dict[str, Any]:
    """Single images while a loop of tiled requests runs; only those sent during a tiled request count."""
    in_flight = threading.Event()
    stop = threading.Event()
    tiled: list[tuple[float, int]] = []

    def tiles_loop() -> None:
        with httpx.Client(timeout=600) as client:
            while not stop.is_set():
                in_flight.set()
                seconds, body = _post(client, url, large, tiling="auto")
                in_flight.clear()
                tiled.append((seconds, len(body.get("tiles") or [])))

    thread = threading.Thread(target=tiles_loop, daemon=True)
    thread.start()
    latencies: list[float] = []
    with httpx.Client(timeout=120) as client:
        while len(latencies) < requests:
            in_flight.wait(60)
            sent_during = in_flight.is_set()
            seconds, _ = _post(client, url, single)
            if sent_during and in_flight.is_set():
                latencies.append(seconds)
    stop.set()
    thread.join(600)
    return {
        **_quantiles(latencies),
        "tiled_requests": len(tiled),
        "tiled_s_median": statistics.median(s for s, _ in tiled) if tiled else None,
        "tiles": tiled[0][1] if tiled else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", type=Path, required=True, help="a large image (JPEG) to tile")
    parser.add_argument(
        "--image", type=Path, default=REPO / "service" / "static" / "samples" / "shapes-1.jpg"
    )
    parser.add_argument("--model", default="efficientdet-d0-synth-int8")
    parser.add_argument("--repository", type=Path, default=REPO / "models")
    parser.add_argument("--requests", type=int, default=30, help="single images per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default="default", help="names this configuration in --out")
    parser.add_argument(
        "--env", nargs="*", default=[], help="server settings, e.g. DETECT_TILING_BATCH_SIZE=1"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/tiles-interactive.jsonl"))
    args = parser.parse_args(argv)
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    if any(row["label"] == args.label and row["model"] == args.model for row in done):
        print(f"{args.label} / {args.model}: already in {args.out}")
        return
    single, large = args.image.read_bytes(), args.large.read_bytes()
    env = {"DETECT_DEFAULT_MODEL": args.model, **dict(item.split("=", 1) for item in args.env)}
    rounds = []
    with single_model_repository(args.repository / args.model) as repo, local_server(repo, env) as server:
        for number in range(args.rounds):
            quiet = idle(server.url, single, args.requests)
            busy = beside_tiles(server.url, single, large, args.requests)
            row = {
                "round": number,
                "idle": quiet,
                "beside_tiles": busy,
                "ratio_p50": busy["p50"] / quiet["p50"],
            }
            print(json.dumps(row), flush=True)
            rounds.append(row)
    summary = {
        "label": args.label,
        "model": args.model,
        "large": args.large.name,
        "env": args.env,
        "idle_p50_ms": 1000 * statistics.median(r["idle"]["p50"] for r in rounds),
        "beside_tiles_p50_ms": 1000 * statistics.median(r["beside_tiles"]["p50"] for r in rounds),
        "ratio_p50": statistics.median(r["ratio_p50"] for r in rounds),
        "tiles": rounds[0]["beside_tiles"]["tiles"],
        "tiled_s_median": statistics.median(r["beside_tiles"]["tiled_s_median"] for r in rounds),
        "rounds": rounds,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        out.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()

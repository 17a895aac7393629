"""A client that keeps posting one image to /detect until a stop file appears; prints its tally as JSON.

    python client.py URL KEY IMAGE STOP_FILE [--keep-alive]

A new connection per request by default (as a client reaching the Service through kube-proxy would open
them); --keep-alive reuses one connection. Every answer that is not 200 is a failure, with its time."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import httpx


def main() -> int:
    url, key, image_path, stop_file = sys.argv[1:5]
    keep_alive = "--keep-alive" in sys.argv[5:]
    image = Path(image_path).read_bytes()
    headers = {"X-API-Key": key, "Content-Type": "image/jpeg"}
    tally: Counter[str] = Counter()
    failures: list[str] = []
    started = time.monotonic()
    limits = httpx.Limits(max_keepalive_connections=1 if keep_alive else 0)
    with httpx.Client(timeout=30, limits=limits) as client:
        while not Path(stop_file).exists() and time.monotonic() - started < 900:
            try:
                status = str(client.post(url, content=image, headers=headers).status_code)
            except httpx.HTTPError as error:
                status = type(error).__name__
            tally[status] += 1
            if status != "200":
                failures.append(f"{time.monotonic() - started:.1f}s {status}")
            time.sleep(0.05)
    print(json.dumps({"tally": tally, "failures": failures[:20], "seconds": time.monotonic() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

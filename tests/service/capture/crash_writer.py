"""Run as a script: write captures into argv[1] as fast as it can, publishing every few, until killed."""

from __future__ import annotations

import sys
from pathlib import Path

from capture_testkit import jpeg, record

from service.capture.store import CaptureStore

if __name__ == "__main__":
    store = CaptureStore(Path(sys.argv[1]), max_bytes=1 << 40)
    store.open()
    data = jpeg(200, size=256)  # large enough that a write spans many syscalls
    print("ready", flush=True)
    for i in range(1_000_000):
        store.write(data, record(store.next_name()))
        if i % 3 == 0:
            store.publish()

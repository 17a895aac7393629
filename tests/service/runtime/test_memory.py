"""glibc's thresholds as `service.runtime.memory.limit_heap_growth` sets them, measured in a fresh process
each (mallopt changes the whole process): request-sized arrays are reused from the heap instead of being
faulted in again every time, and blocks above the threshold still go back to the system when freed."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only")

FAULTS = """
import resource, sys, threading
import numpy as np
from service.runtime.memory import limit_heap_growth
assert limit_heap_growth(int(sys.argv[1]))

def request():  # what a request makes at the network's size: a 512x512 RGB input and a smaller array
    for _ in range(100):
        image = np.ones(512 * 512 * 3, np.uint8)
        scaled = np.ones(300 * 1024, np.uint8)

request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
request()
for _ in range(2):  # as the inference and worker threads do (each thread gets its own heap)
    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

RETURNED = """
import sys
import numpy as np
from service.runtime.memory import limit_heap_growth
assert limit_heap_growth(int(sys.argv[1]))

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

base = rss_mb()
held = [np.ones(2 * 1024 * 1024, np.uint8) for _ in range(64)]  # 128 MiB of 2 MiB blocks, as large bodies
peak = rss_mb()
del held
print(peak - base, rss_mb() - base)
"""


def run(snippet: str, threshold_kib: int) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", snippet, str(threshold_kib)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [float(v) for v in done.stdout.split()]


def test_request_sized_arrays_are_reused_from_the_heap() -> None:
    (at_default,) = run(FAULTS, 1024)
    (at_128_kib,) = run(FAULTS, 128)
    # 300 requests' arrays: at 128 KiB each is mapped and faulted in page by page (~80,000 faults).
    assert at_128_kib > 50_000
    assert at_default < at_128_kib / 20


def test_blocks_above_the_threshold_go_back_to_the_system() -> None:
    grown, left = run(RETURNED, 1024)
    assert grown > 100  # MiB
    assert left < 10

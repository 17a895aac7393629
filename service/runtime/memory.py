"""Make freed request memory go back to the operating system (glibc's malloc on Linux).

glibc serves allocations over its mmap threshold (128 KiB at first) with their own mappings, returned
to the system when freed; but each time such a block is freed the threshold rises to its size (up to 32
MiB), so after the first few large request bodies every later one lands in the heap, which is not given
back: RSS stays at its high-water mark after the requests are gone. Setting the threshold explicitly
turns that adjustment off, so large buffers (bodies, decoded images) always get their own mappings.

The threshold is ``DETECT_MALLOC_MMAP_THRESHOLD_KIB`` (1 MiB), and the trim threshold twice that: below
it, the arrays every request makes at the network's size (a 512x512 RGB input is 768 KiB) are reused from
the heap instead of being mapped, page-faulted and unmapped each time, which cost the default model ~0.5
ms of system CPU per request at 128 KiB (docs/benchmarks/request-path.md, "The mmap threshold").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_KIB = 1024


def limit_heap_growth(threshold_kib: int = MMAP_THRESHOLD_KIB) -> bool:
    """Fix glibc's mmap threshold at ``threshold_kib``, and its trim threshold at twice that (glibc's own
    ratio when it moves them): a heap keeps that much free memory at its top rather than giving it back
    after each request and faulting it in again for the next; False where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc without mallopt
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, threshold_kib * 1024)) and bool(
        mallopt(M_TRIM_THRESHOLD, 2 * threshold_kib * 1024)
    )
    if not ok:
        logger.warning("mallopt failed; freed memory may not return to the system")
    return ok

"""Make freed request memory go back to the operating system (glibc's malloc on Linux).

glibc serves allocations over its mmap threshold (128 KiB at first) with their own mappings, returned
to the system when freed; but each time such a block is freed the threshold rises to its size (up to 32
MiB), so after the first few large request bodies every later one lands in the heap, which is not given
back: RSS stays at its high-water mark after the requests are gone. Setting the threshold explicitly
turns that adjustment off, so large buffers (bodies, decoded images) always get their own mappings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024


def limit_heap_growth() -> bool:
    """Fix glibc's mmap threshold at 128 KiB; False where there is no glibc (nothing to do)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc without mallopt
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not ok:
        logger.warning("mallopt(M_MMAP_THRESHOLD) failed; freed memory may not return to the system")
    return ok

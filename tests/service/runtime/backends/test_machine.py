"""What the machine offers the backends: one OpenVINO Core per process, so that models loaded and
unloaded in any order leave every thread a signal stack that is still mapped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from service_testkit import add_toy_model

from service.runtime.backends.machine import cpu_int8_instructions, openvino_core

pytest.importorskip("openvino", reason="the openvino package (serve extra) is not installed")

# Runs in a child process: before the Core was shared, this killed the process with SIGSEGV.
UNLOAD_IN_LOAD_ORDER_THEN_SIGNAL = """
import ctypes, gc, os, signal, sys
from service.runtime.backends import load_artifact
from service.settings import Settings

class Stack(ctypes.Structure):
    _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]

def signal_stack_mapped():
    stack = Stack()
    ctypes.CDLL(None).sigaltstack(None, ctypes.byref(stack))
    if stack.flags & 2:  # SS_DISABLE: none installed
        return True
    with open("/proc/self/maps") as maps:
        spans = [[int(a, 16) for a in line.split()[0].split("-")] for line in maps]
    return any(lo <= stack.sp < hi for lo, hi in spans)

settings = Settings(intra_op_threads=1)
first = load_artifact(sys.argv[1], "openvino", settings)
second = load_artifact(sys.argv[1], "openvino", settings)
first.close(); del first; gc.collect()
second.close(); del second; gc.collect()
print("mapped" if signal_stack_mapped() else "unmapped", flush=True)
handled = []
signal.signal(signal.SIGUSR1, lambda *_: handled.append(True))
os.kill(os.getpid(), signal.SIGUSR1)
print("handled" if handled else "not handled", flush=True)
"""


def test_models_unloaded_in_load_order_leave_a_usable_signal_stack(tmp_path: Path) -> None:
    """Two OpenVINO backends loaded, then unloaded first-in first-out (a model swap), then a signal: the
    thread's signal stack is still mapped and the handler runs."""
    version_dir = add_toy_model(tmp_path / "repo", "toy")
    result = subprocess.run(
        [sys.executable, "-c", UNLOAD_IN_LOAD_ORDER_THEN_SIGNAL, str(version_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != -signal.SIGSEGV, "the signal landed on a freed signal stack"
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["mapped", "handled"]


def test_the_openvino_core_is_one_per_process() -> None:
    assert openvino_core() is openvino_core()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("avx2 avx512f avx512_vnni amx_bf16 amx_tile amx_int8", "amx_int8"),
        ("avx2 avx512f avx512_vnni avx512_bf16", "avx512_vnni"),
        ("avx2 avx_vnni", "avx_vnni"),
        ("sse4_2 avx2 fma", "none"),
    ],
)
def test_the_int8_instructions_are_the_most_capable_the_cpu_lists(
    tmp_path: Path, flags: str, expected: str
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu {flags}\n\nprocessor\t: 1\nflags\t\t: fpu {flags}\n")
    assert cpu_int8_instructions(str(cpuinfo)) == expected
    assert cpu_int8_instructions(str(tmp_path / "absent")) == "unknown"

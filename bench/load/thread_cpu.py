"""Where a server's CPU goes, thread by thread: each thread's CPU time from ``/proc`` (the server's process
and its descendants), named by the Python thread it runs (``py-spy dump``, a dev dependency) or
``native`` (threads Python did not start: the inference runtime's workers, OpenCV's pool).

Exact times, not samples: what a window of load cost each thread is the difference of two `snapshot` s.
Threads of the same name but a numbered suffix (``detect-worker_0``, ``detect-worker_1``) are one group;
a child process's threads are prefixed ``pN:`` (N: its order below the server by pid, from 1).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.load.proc_cpu import PROC, descendants

_DUMP_THREAD = re.compile(r'^Thread (\d+) \([^)]*\): "([^"]*)"', re.MULTILINE)

Snapshot = dict[tuple[int, int], float]  # (pid, tid) -> CPU seconds so far


def snapshot(pid: int, proc: Path = PROC) -> Snapshot:
    """CPU seconds (user + system) of every thread of ``pid`` and its descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    times: Snapshot = {}
    for member in [pid, *descendants(pid, proc)]:
        try:
            tasks = list((proc / str(member) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            times[(member, int(task.name))] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return times


def py_spy() -> str | None:
    """py-spy next to this interpreter, else on PATH (None: not installed)."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def thread_names(pid: int, proc: Path = PROC) -> dict[tuple[int, int], str]:
    """The Python name of each thread of ``pid`` and its descendants that runs Python ({} without py-spy)."""
    tool = py_spy()
    if tool is None:
        return {}
    names: dict[tuple[int, int], str] = {}
    for member in [pid, *descendants(pid, proc)]:
        dump = subprocess.run(
            [tool, "dump", "--pid", str(member), "--nonblocking"], capture_output=True, text=True, timeout=30
        )
        names.update(parse_dump(member, dump.stdout))
    return names


def parse_dump(pid: int, text: str) -> dict[tuple[int, int], str]:
    """``Thread 1234 (idle): "MainThread"`` lines of ``py-spy dump`` -> {(pid, 1234): "MainThread"}."""
    return {(pid, int(tid)): name for tid, name in _DUMP_THREAD.findall(text)}


def by_thread(
    pid: int, before: Snapshot, after: Snapshot, names: dict[tuple[int, int], str]
) -> dict[str, float]:
    """CPU seconds each thread group used between two snapshots, largest first."""
    children = sorted({member for member, _ in after if member != pid})
    groups: dict[str, float] = {}
    for key, cpu in after.items():
        used = cpu - before.get(key, 0.0)
        if used <= 0:
            continue
        name = re.sub(r"_\d+$", "", names.get(key, "native"))
        if key[0] != pid:
            name = f"p{children.index(key[0]) + 1}:{name}"
        groups[name] = groups.get(name, 0.0) + used
    return dict(sorted(groups.items(), key=lambda item: -item[1]))

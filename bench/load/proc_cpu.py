"""CPU time and context switches of a process read from ``/proc`` (Linux; no psutil), and which local
process listens on a TCP port (so the load client can report the server's CPU per request without being
told its pid).

Voluntary context switches count every time one of the process's threads blocked (waited on a lock, a
queue, a socket): thread hand-offs and wake-ups per request, which the machine's load does not change."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuTimes:
    user_s: float
    system_s: float
    voluntary_switches: int = 0  # summed over the process's threads alive at the time

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(
            self.user_s - other.user_s,
            self.system_s - other.system_s,
            self.voluntary_switches - other.voluntary_switches,
        )

    @property
    def total_s(self) -> float:
        return self.user_s + self.system_s


def cpu_times(pid: int, proc: Path = PROC) -> CpuTimes:
    """User and system CPU seconds of process ``pid`` (all its threads) so far."""
    stat = (proc / str(pid) / "stat").read_text()
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # utime, stime: fields 14, 15
    return CpuTimes(int(fields[11]) / ticks, int(fields[12]) / ticks, voluntary_switches(pid, proc))


def voluntary_switches(pid: int, proc: Path = PROC) -> int:
    """Voluntary context switches of all of ``pid``'s threads so far."""
    total = 0
    for task in (proc / str(pid) / "task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def listening_inodes(port: int, proc: Path = PROC) -> set[str]:
    """Socket inodes listening on TCP ``port`` (IPv4 and IPv6)."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def listener_pid(port: int, proc: Path = PROC) -> int | None:
    """The pid of the local process listening on TCP ``port``, or None (not found, or not ours to see)."""
    inodes = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue
    return None

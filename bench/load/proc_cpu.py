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
    """User and system CPU seconds so far of process ``pid`` (all its threads) and of its live descendants
    (a server that works in child processes, as LitServe does, is counted whole)."""
    ticks = os.sysconf("SC_CLK_TCK")
    user = system = 0
    switches = 0
    for member in [pid, *descendants(pid, proc)]:
        try:
            fields = _stat_fields(member, proc)
            member_switches = voluntary_switches(member, proc)
        except OSError:
            if member == pid:
                raise
            continue  # a child that ended meanwhile
        # utime, stime: fields 14, 15
        user, system, switches = user + int(fields[11]), system + int(fields[12]), switches + member_switches
    return CpuTimes(user / ticks, system / ticks, switches)


def _stat_fields(pid: int, proc: Path) -> list[str]:
    """/proc/PID/stat from field 3 on (the command name, field 2, is in parentheses and may hold spaces)."""
    stat = (proc / str(pid) / "stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """The live processes below ``pid`` (children, their children, ...), from each process's parent pid."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry.name), proc)[1])  # field 4: ppid
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    frontier = [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


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

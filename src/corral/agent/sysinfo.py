"""What the node has and what its attempts use, read from /proc and the file system.

Standalone worker mode (seed 001): an agent started without capacity flags reports the machine's
own capacity. Usage is measured per attempt session (every attempt is started in a new session, so
its process tree shares one session id unless a process calls setsid itself).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def cpu_count() -> float:
    # The affinity mask is what this process may actually use (containers, taskset), so prefer it.
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


def mem_total_mib() -> int:
    try:
        for line in (PROC / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def disk_free_mib(path: Path) -> int:
    path.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(path).free // (1024 * 1024)


def writable_mib(path: Path) -> int:
    """The space this process, and the attempts it starts as its user, can still write under `path`.
    Root may also fill the blocks a file system keeps back for it (ext4's 5 %), which
    `disk_free_mib` leaves out."""
    stat = os.statvfs(path)
    blocks = stat.f_bfree if os.geteuid() == 0 else stat.f_bavail
    return blocks * stat.f_frsize // (1024 * 1024)


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    state: str
    session: int
    pgrp: int
    cpu_ticks: int  # utime + stime + cutime + cstime: reaped children count towards their parent
    rss_bytes: int
    start_ticks: int = 0  # when it started, in clock ticks after boot: tells a pid's reuse apart
    ppid: int = 0


def read_stat(pid: int) -> ProcStat | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses; everything after the last ')' is fixed-format.
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            state=fields[0],
            pgrp=int(fields[2]),
            session=int(fields[3]),
            cpu_ticks=int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14]),
            rss_bytes=int(fields[21]) * _PAGE,
            start_ticks=int(fields[19]),
            ppid=int(fields[1]),
        )
    except (IndexError, ValueError):
        return None


def all_stats() -> list[ProcStat]:
    out = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None:
                out.append(stat)
    return out


def session_members(session: int, outside_group: int | None = None) -> list[int]:
    """Live (non-zombie) processes of a session; with `outside_group`, those not in that process group."""
    return [s.pid for s in all_stats() if s.session == session and s.state != "Z" and s.pgrp != outside_group]


def ignores(pid: int, sig: int) -> bool | None:
    """Whether the process ignores signal `sig` (the SigIgn mask /proc gives); None: not known (the
    process gone, no /proc)."""
    try:
        lines = (PROC / str(pid) / "status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("SigIgn:"):
            try:
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
            except (IndexError, ValueError):
                return None
    return None


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `pid`."""
    return [s.pid for s in all_stats() if s.ppid == pid and s.state != "Z"]


@dataclass(frozen=True, slots=True)
class SessionUsage:
    cpu_seconds: float
    rss_bytes: int


def usage_by_session(sessions: set[int], without_leaders: AbstractSet[int] = frozenset()) -> dict[int, SessionUsage]:
    """What each session's processes use; in the sessions of `without_leaders`, not counting their
    leader (an attempt's keeper, corral's own process as the agent is, not the job's)."""
    ticks: dict[int, int] = {}
    rss: dict[int, int] = {}
    for stat in all_stats():
        if stat.pid == stat.session and stat.session in without_leaders:
            continue
        if stat.session in sessions and stat.state != "Z":
            ticks[stat.session] = ticks.get(stat.session, 0) + stat.cpu_ticks
            rss[stat.session] = rss.get(stat.session, 0) + stat.rss_bytes
    return {s: SessionUsage(ticks[s] / _CLK_TCK, rss[s]) for s in ticks}

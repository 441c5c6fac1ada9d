"""What the server's processes cost the machine: memory, CPU, threads, descriptors.

Read from ``/proc`` when ``status`` is asked or Prometheus scrapes, never per job (psutil
stays out of the runtime dependencies; the tests compare these figures with its).
``server()`` describes this process; ``compaction(pid)`` the online compaction's process
while it runs (docs/compaction.md): its resident set counts the pages it still shares with
the server since the fork, its unique set only what it added (copied on write, or its
own), which is what the machine pays for it.
"""

from __future__ import annotations

import os
import resource
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    """``/proc/PID/stat``'s fields from the state on (the name, in parentheses, may hold
    spaces): index 0 is the state, 11/12 utime/stime in ticks, 17 the threads, 20 vsize in
    bytes, 21 rss in pages."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].decode().split()


def server() -> dict[str, Any]:
    """This process: ``pid``, ``rss_bytes``, ``peak_rss_bytes`` (the most it was resident
    since start), ``vms_bytes``, ``cpu_user_s``, ``cpu_system_s``, ``threads``,
    ``open_fds`` and ``max_fds`` (the soft limit; None: unlimited)."""
    fields = _stat("self")
    times = os.times()
    rss = int(fields[21]) * _PAGE
    max_fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return {
        "pid": os.getpid(),
        "rss_bytes": rss,
        # Linux counts ru_maxrss in KiB
        "peak_rss_bytes": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, rss),
        "vms_bytes": int(fields[20]),
        "cpu_user_s": round(times.user, 3),
        "cpu_system_s": round(times.system, 3),
        "threads": int(fields[17]),
        "open_fds": len(os.listdir("/proc/self/fd")) - 1,  # less the listing's own
        "max_fds": None if max_fds == resource.RLIM_INFINITY else max_fds,
    }


def compaction(pid: int) -> dict[str, Any] | None:
    """The compaction process ``pid`` (a child of this one, not yet reaped, so the pid
    cannot name another process): ``pid``, ``rss_bytes``, ``unique_bytes``,
    ``cpu_user_s``, ``cpu_system_s``; None once it has exited."""
    try:
        fields = _stat(pid)
        if fields[0] in ("Z", "X"):  # exited, not yet reaped
            return None
        rss, unique = _resident(pid)
    except (FileNotFoundError, ProcessLookupError):  # reaped while we looked
        return None
    return {
        "pid": pid,
        "rss_bytes": rss,
        "unique_bytes": unique,
        "cpu_user_s": round(int(fields[11]) / _TICKS, 3),
        "cpu_system_s": round(int(fields[12]) / _TICKS, 3),
    }


def _resident(pid: int) -> tuple[int, int]:
    """Resident and unique (private: in no other process's page tables) bytes of ``pid``:
    one walk of its page tables (``smaps_rollup``; ``smaps``, summed, before Linux 4.14)."""
    try:
        smaps = open(f"/proc/{pid}/smaps_rollup", "rb")
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            raise
        smaps = open(f"/proc/{pid}/smaps", "rb")
    rss = unique = 0
    with smaps:
        for line in smaps:
            if line.startswith(b"Rss:"):
                rss += int(line.split()[1])
            elif line.startswith((b"Private_Clean:", b"Private_Dirty:", b"Private_Hugetlb:")):
                unique += int(line.split()[1])
    return rss * 1024, unique * 1024  # the kernel counts kB


def reaped(usage: Any) -> dict[str, Any]:
    """What a reaped child used over its life (``os.wait4``'s resource usage):
    ``cpu_user_s``, ``cpu_system_s`` and ``peak_rss_bytes`` (which counts the pages it
    shared with the server, resident in both); all None when ``usage`` is (the child was
    reaped elsewhere)."""
    if usage is None:
        return {"cpu_user_s": None, "cpu_system_s": None, "peak_rss_bytes": None}
    return {
        "cpu_user_s": round(usage.ru_utime, 3),
        "cpu_system_s": round(usage.ru_stime, 3),
        "peak_rss_bytes": usage.ru_maxrss * 1024,
    }

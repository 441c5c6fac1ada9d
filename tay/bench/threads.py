"""The server's CPU and context switches per thread, from ``/proc/PID/task``.

Two snapshots (the go signal and the last execution) give each thread's user and system
time and its voluntary / involuntary context switches over the load. Threads are grouped
by role: ``loop`` is the main thread (the event loop: protocol, engine, replies),
``writer`` the C journal writer (named ``tay-writer`` in csrc/writer.c), ``other`` the
rest. A thread that exits between the snapshots keeps what it had at the first one out of
the figures; none does during a load. Without ``/proc`` the figures are skipped.
"""

from __future__ import annotations

import os
from typing import Any

WRITER_THREAD = "tay-writer"
ROLES = ("loop", "writer", "other")
_FIELDS = ("user_s", "system_s", "voluntary", "involuntary")


def snapshot(pid: int) -> dict[int, tuple[str, float, float, int, int]]:
    """{tid: (comm, user s, system s, voluntary switches, involuntary switches)}."""
    tick = os.sysconf("SC_CLK_TCK")
    threads: dict[int, tuple[str, float, float, int, int]] = {}
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return threads
    for tid in tids:
        try:
            with open(f"{base}/{tid}/stat", encoding="utf-8") as handle:
                stat = handle.read()
            with open(f"{base}/{tid}/status", encoding="utf-8") as handle:
                status = handle.read()
        except OSError:
            continue  # it exited meanwhile
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        # fields[0] is field 3 (state) of proc(5): utime is field 14, stime 15
        switches = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
                    if line.endswith(tuple("0123456789")) and "ctxt_switches" in line}
        threads[int(tid)] = (comm, int(fields[11]) / tick, int(fields[12]) / tick,
                             switches.get("voluntary_ctxt_switches", 0),
                             switches.get("nonvoluntary_ctxt_switches", 0))
    return threads


def role(pid: int, tid: int, comm: str) -> str:
    if tid == pid:
        return "loop"
    return "writer" if comm == WRITER_THREAD else "other"


def by_role(pid: int, before: dict[int, tuple[str, float, float, int, int]],
            after: dict[int, tuple[str, float, float, int, int]]) -> dict[str, Any]:
    """What each role used between the snapshots ({"skipped": reason} without /proc)."""
    if not after:
        return {"skipped": f"/proc/{pid}/task is not readable"}
    totals = {name: dict.fromkeys(_FIELDS, 0.0) for name in ROLES}
    for tid, (comm, *now) in after.items():
        then = before.get(tid, (comm, 0.0, 0.0, 0, 0))[1:]
        into = totals[role(pid, tid, comm)]
        for field, new, old in zip(_FIELDS, now, then):
            into[field] += new - old
    for into in totals.values():
        into["user_s"] = round(into["user_s"], 3)
        into["system_s"] = round(into["system_s"], 3)
        into["voluntary"] = int(into["voluntary"])
        into["involuntary"] = int(into["involuntary"])
    return totals


def per_job(totals: dict[str, Any], jobs: int) -> dict[str, Any] | None:
    """CPU (µs) and context switches per job, by role; None when skipped."""
    if "skipped" in totals:
        return None
    jobs = max(jobs, 1)
    return {name: {"user_us": round(t["user_s"] * 1e6 / jobs, 1),
                   "system_us": round(t["system_s"] * 1e6 / jobs, 1),
                   "switches": round((t["voluntary"] + t["involuntary"]) / jobs, 2),
                   "involuntary": round(t["involuntary"] / jobs, 2)}
            for name, t in totals.items()}

"""System calls of the server during the load, counted by ``perf stat`` tracepoints.

``perf stat -e raw_syscalls:sys_enter,... -p PID`` attaches to every thread of the server
(the journal writer included: it exists before the load starts) and counts in the kernel,
so the server runs at full speed. Without ``perf`` (Debian's ``linux-perf``) or without
permission to read tracepoints the count is skipped with the reason, never guessed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

EVENTS = {"raw_syscalls:sys_enter": "all", "syscalls:sys_enter_fdatasync": "fdatasync",
          "syscalls:sys_enter_futex": "futex", "syscalls:sys_enter_write": "write",
          "syscalls:sys_enter_read": "read", "syscalls:sys_enter_epoll_wait": "epoll_wait"}
# counted too with --syscalls by-kind, where the kernel has the tracepoint (perf refuses the
# whole list if one is missing): the loop's epoll_pwait (uvloop) and epoll_ctl, the writer's
# pwrite / read-back / path checks (newfstatat), and a sendmsg / recvfrom / writev the
# transports might use. Opt-in: every tracepoint slows each syscall it sees, and these see
# ~20 of per-event's ~30 syscalls per job, which moved the default run's server CPU and p99
MORE_EVENTS = {f"syscalls:sys_enter_{name}": name for name in (
    "epoll_pwait", "epoll_ctl", "pwrite64", "pread64", "newfstatat", "sendmsg", "recvfrom",
    "writev")}
TRACEFS = ("/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events")
ATTACH_S = 0.3


def available_events() -> dict[str, str]:
    """EVENTS, plus those of MORE_EVENTS whose tracepoint this kernel has."""
    events = dict(EVENTS)
    for root in TRACEFS:
        if os.path.isdir(os.path.join(root, "syscalls")):
            events.update({event: name for event, name in MORE_EVENTS.items()
                           if os.path.isdir(os.path.join(root, *event.split(":")))})
            break
    return events


@dataclass
class SyscallCounter:
    process: subprocess.Popen[str] | None
    skipped: str = ""
    events: dict[str, str] | None = None  # tracepoint -> name counted

    @classmethod
    def attach(cls, pid: int, by_kind: bool = False) -> "SyscallCounter":
        perf = shutil.which("perf")
        if perf is None:
            return cls(None, "perf not installed (apt-get install linux-perf)")
        events = available_events() if by_kind else dict(EVENTS)
        process = subprocess.Popen(
            [perf, "stat", "-x", ",", "-e", ",".join(events), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(ATTACH_S)  # perf gives no sign once it is attached; it takes ~0.1 s
        return cls(process, events=events)

    def stop(self) -> dict[str, Any]:
        """The counts by name ({"skipped": reason} when there are none)."""
        if self.process is None:
            return {"skipped": self.skipped}
        self.process.send_signal(signal.SIGINT)
        try:
            _, errors = self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return {"skipped": "perf stat did not stop"}
        return parse_counts(errors, self.events or EVENTS)


def parse_counts(errors: str, events: dict[str, str]) -> dict[str, Any]:
    """``perf stat -x ,`` output (its stderr) as counts by name."""
    counts: dict[str, Any] = {}
    for line in errors.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2] in events and fields[0].strip().isdigit():
            counts[events[fields[2]]] = int(fields[0])
    if "all" not in counts:
        reason = errors.strip().splitlines()[-1:] or ["no output"]
        return {"skipped": f"perf stat counted nothing ({reason[0][:120]})"}
    return counts

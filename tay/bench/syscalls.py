"""System calls of the server during the load, counted by ``perf stat`` tracepoints.

``perf stat -e raw_syscalls:sys_enter,... -p PID`` attaches to every thread of the server
(the journal writer included: it exists before the load starts) and counts in the kernel,
so the server runs at full speed. Without ``perf`` (Debian's ``linux-perf``) or without
permission to read tracepoints the count is skipped with the reason, never guessed.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

EVENTS = {"raw_syscalls:sys_enter": "all", "syscalls:sys_enter_fdatasync": "fdatasync",
          "syscalls:sys_enter_futex": "futex", "syscalls:sys_enter_write": "write",
          "syscalls:sys_enter_read": "read", "syscalls:sys_enter_epoll_wait": "epoll_wait"}
ATTACH_S = 0.3


@dataclass
class SyscallCounter:
    process: subprocess.Popen[str] | None
    skipped: str = ""

    @classmethod
    def attach(cls, pid: int) -> "SyscallCounter":
        perf = shutil.which("perf")
        if perf is None:
            return cls(None, "perf not installed (apt-get install linux-perf)")
        process = subprocess.Popen(
            [perf, "stat", "-x", ",", "-e", ",".join(EVENTS), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(ATTACH_S)  # perf gives no sign once it is attached; it takes ~0.1 s
        return cls(process)

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
        counts: dict[str, Any] = {}
        for line in errors.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] in EVENTS and fields[0].strip().isdigit():
                counts[EVENTS[fields[2]]] = int(fields[0])
        if "all" not in counts:
            reason = errors.strip().splitlines()[-1:] or ["no output"]
            return {"skipped": f"perf stat counted nothing ({reason[0][:120]})"}
        return counts

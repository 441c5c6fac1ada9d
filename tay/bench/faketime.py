"""A child process's wall clock, moved while it runs, with Debian's libfaketime.

The process starts with ``OffsetClock.env()`` in its environment: libfaketime, preloaded,
reads the clock's offset from a file (at every clock read, or once per ``cache_s``
seconds), so ``set`` moves the wall clock of a running ``tay serve``. Only the wall clock
moves (``CLOCK_REALTIME``); the monotonic clock stays real, as when NTP or an operator
steps a host's clock. libfaketime's own speed-up (``FAKETIME="+0 x10"``) is not used: it
also shortens every poll and sleep timeout, and an event loop then spins.

Used by the wall-clock tests (``tests/wall_clock.py``) and ``benchmarks/soak_daemon.py``.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketimeMT.so.1"  # the thread-safe build


def library() -> str | None:
    """libfaketime's path (Debian's package ``faketime``), None when it is missing."""
    found = sorted(glob.glob(LIBRARY_GLOB))
    return found[0] if found else None


class OffsetClock:
    """The offset file a faked process's wall clock runs by."""

    def __init__(self, library: str, path: Path) -> None:
        self.library = library
        self.path = Path(path)
        self.offset_s = 0
        self.set(0)

    def env(self, cache_s: int | None = None) -> dict[str, str]:
        """The environment that fakes a process's clock: ``cache_s`` None reads the file
        at every clock read (a step is seen at once), else at most once per ``cache_s``."""
        env = {
            "LD_PRELOAD": self.library,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "NO_FAKE_STAT": "1",  # file times stay real (the store's files are not faked)
        }
        if cache_s is None:
            env["FAKETIME_NO_CACHE"] = "1"
        else:
            env["FAKETIME_CACHE_DURATION"] = str(cache_s)
        return env

    def set(self, offset_s: int) -> None:
        """Run the wall clock ``offset_s`` seconds from real time (ahead or behind)."""
        staging = self.path.with_suffix(".next")
        staging.write_text(f"{offset_s:+d}\n")
        os.replace(staging, self.path)  # a reader sees the old offset or the new, whole
        self.offset_s = offset_s

    def now_ms(self) -> int:
        """The faked wall clock now, as the process reads it (Unix ms)."""
        return int(time.time() * 1000) + self.offset_s * 1000

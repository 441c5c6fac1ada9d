"""A real process's wall clock, moved while it runs, with Debian's libfaketime.

The process starts with ``WallClock.env()`` in its environment: libfaketime (preloaded)
reads the offset from a file at every clock read (``FAKETIME_NO_CACHE``), so ``step``
moves the clock of a running ``tay serve`` at once. By default only the wall clock moves
(``CLOCK_REALTIME``; the monotonic clock stays real), as when NTP or an operator steps a
host's clock; ``monotonic=True`` moves both, as a suspended host resumes.

``make test`` installs the package (``faketime``) when it runs as root; elsewhere the
tests that need it are skipped, and the run ends with a section that says so.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

import pytest

_LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketimeMT.so.1"  # the threads-safe build
not_run: list[str] = []  # why the wall-clock tests were skipped, for the run's summary


def library() -> str:
    """libfaketime's path; skips the test (and says so at the end) when it is missing."""
    found = sorted(glob.glob(_LIBRARY_GLOB))
    if not found:
        reason = ("Debian's faketime is missing: `make test` installs it when run as root "
                  "(apt-get install faketime)")
        not_run.append(reason)
        pytest.skip(f"WALL-CLOCK TESTS NOT RUN: {reason}")
    return found[0]


class WallClock:
    """The offset a faked process's wall clock runs at, kept in ``directory``."""

    def __init__(self, directory: Path, *, monotonic: bool = False) -> None:
        self.library = library()
        self.path = Path(directory) / "faketime-offset"
        self.monotonic = monotonic
        self.offset_s = 0
        self._write()

    def env(self) -> dict[str, str]:
        env = {
            "LD_PRELOAD": self.library,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",  # the file is read at every clock read: a step is seen at once
            "NO_FAKE_STAT": "1",  # file times stay real (the store's files are not the test)
        }
        if not self.monotonic:
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return env

    def now_ms(self) -> int:
        """The faked wall clock now, as the process reads it (Unix ms)."""
        return int(time.time() * 1000) + self.offset_s * 1000

    def step(self, seconds: int) -> None:
        """Move the clock by ``seconds`` (forward or back) from where it runs now."""
        self.offset_s += seconds
        self._write()

    def _write(self) -> None:
        staging = self.path.with_suffix(".next")
        staging.write_text(f"{self.offset_s:+d}\n")
        os.replace(staging, self.path)  # a reader sees the old offset or the new, whole

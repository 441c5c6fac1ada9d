"""A real process's wall clock, moved while it runs, with Debian's libfaketime
(``tay.bench.faketime``).

A test starts the process with ``WallClock.env()`` in its environment, then ``step``
moves the clock of the running process at once; the monotonic clock stays real, as when
NTP or an operator steps a host's clock.

``make test`` installs the package (``faketime``) when it runs as root; elsewhere the
tests that need it are skipped, and the run ends with a section that says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tay.bench import faketime

not_run: list[str] = []  # why the wall-clock tests were skipped, for the run's summary


def library() -> str:
    """libfaketime's path; skips the test (and says so at the end) when it is missing."""
    found = faketime.library()
    if found is None:
        reason = ("Debian's faketime is missing: `make test` installs it when run as root "
                  "(apt-get install faketime)")
        not_run.append(reason)
        pytest.skip(f"WALL-CLOCK TESTS NOT RUN: {reason}")
    return found


class WallClock(faketime.OffsetClock):
    """The wall clock of a faked process, its offset kept in ``directory``."""

    def __init__(self, directory: Path) -> None:
        super().__init__(library(), Path(directory) / "faketime-offset")

    def step(self, seconds: int) -> None:
        """Move the clock by ``seconds`` (forward or back) from where it runs now."""
        self.set(self.offset_s + seconds)

"""A one-line progress bar on stderr, redrawn at most every 0.1 s (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, label: str, total: int, stream: TextIO | None = None,
                 width: int = 30) -> None:
        self.label, self.total, self.width = label, max(total, 1), width
        self.stream = stream if stream is not None else sys.stderr
        self._last_draw = 0.0
        self._started = time.monotonic()

    def render(self, done: int, note: str = "") -> str:
        filled = min(self.width, self.width * done // self.total)
        elapsed = time.monotonic() - self._started
        bar = "#" * filled + "." * (self.width - filled)
        return f"\r{self.label:<22} [{bar}] {done:>7}/{self.total} {elapsed:6.1f}s {note}"

    def update(self, done: int, note: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_draw >= 0.1:
            self._last_draw = now
            self.stream.write(self.render(done, note))
            self.stream.flush()

    def finish(self, done: int, note: str = "") -> None:
        self.update(done, note, force=True)
        self.stream.write("\n")
        self.stream.flush()

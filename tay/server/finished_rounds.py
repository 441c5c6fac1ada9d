"""What becomes of finished jobs while the server runs, a round at a time between loop turns.

Every ``interval_s`` a round
* packs the persistent jobs that had finished when the previous round ended
  (``EngineState.pack_finished``, tay.engine.retained.packed), in loop callbacks of at most
  ``slice_s`` each, so a round of a busy second never holds the loop for long. A job is thus packed
  between one and two intervals after it finished: a client reading its result right away
  finds it unpacked;
* parks the jobs that had begun to wait (for a dispatch or their due time) when the
  previous round ended and still wait (``EngineState.park_waiting``,
  tay.engine.retained.jobs.ParkedJobEntry): a backlog is then one object a job to the
  cycle collector instead of three, in time slices as packing is;
* drops the volatile jobs that expired under the store's terminal retention
  (``EngineState.expire_volatile``): they are in no store, so no compaction expires them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from typing import Any

INTERVAL_S = 1.0
# A slice is bounded by the clock, not by a count of jobs: while an online compaction's
# thread takes its share of the GIL, a job costs the loop ~10x its usual time (1,024 jobs
# held the loop for up to 2 s, 2026-12-06), and every request waits for the slice.
SLICE_S = 0.002
CHUNK_JOBS = 32  # jobs between looks at the clock (~0.05-0.5 ms of packing)


class FinishedRounds:
    """``driver``: the engine's (its loop and wall clock); ``store``: its open store (the
    terminal retention, which a compaction may change)."""

    def __init__(self, driver: Any, store: Any, interval_s: float | None = None,
                 slice_s: float = SLICE_S, chunk_jobs: int = CHUNK_JOBS) -> None:
        self.driver = driver
        self.store = store
        self.engine = store.engine
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.slice_s = slice_s
        self.chunk_jobs = chunk_jobs
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self.engine.start_packing()
        self.engine.start_parking()
        self._handle = self.driver.loop.call_later(self.interval_s, self._round)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _round(self) -> None:
        if self._slice(self.engine.pack_finished):
            self._handle = self.driver.loop.call_soon(self._round)
            return
        self._park()

    def _park(self) -> None:
        loop = self.driver.loop
        if self._slice(self.engine.park_waiting):
            self._handle = loop.call_soon(self._park)
            return
        self.engine.expire_volatile(self.store.retention, self.driver.wall_ms())
        self._handle = loop.call_later(self.interval_s, self._round)

    def _slice(self, step: Callable[[int], bool]) -> bool:
        """``step`` a chunk at a time for up to ``slice_s``; True when its round has more."""
        deadline = perf_counter() + self.slice_s
        chunk = self.chunk_jobs
        while step(chunk):
            if perf_counter() >= deadline:
                return True
        return False

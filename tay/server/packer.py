"""Packs the jobs the server finished, between loop turns (tay.engine.packed).

Every ``interval_s`` a round packs the jobs that had finished when the previous round
ended (``EngineState.pack_finished``), at most ``slice_jobs`` per loop callback, so a round
of a busy second never holds the loop for long. A job is thus packed between one and two
intervals after it finished: a client reading its result right away finds it unpacked.
"""

from __future__ import annotations

import asyncio
from typing import Any

INTERVAL_S = 1.0
SLICE_JOBS = 1024  # about 2-3 ms of packing per callback


class FinishedPacker:
    def __init__(self, engine: Any, loop: asyncio.AbstractEventLoop,
                 interval_s: float | None = None, slice_jobs: int | None = None) -> None:
        self.engine = engine
        self.loop = loop
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.slice_jobs = SLICE_JOBS if slice_jobs is None else slice_jobs
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self.engine.start_packing()
        self._handle = self.loop.call_later(self.interval_s, self._round)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _round(self) -> None:
        if self.engine.pack_finished(self.slice_jobs):
            self._handle = self.loop.call_soon(self._round)
        else:
            self._handle = self.loop.call_later(self.interval_s, self._round)

"""``tay serve``'s rounds (tay.server.finished_rounds) give the loop back every ``slice_s``,
however long each job takes: a slice is bounded by the clock, not by a count of jobs."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import uvloop

from tay.server.finished_rounds import CHUNK_JOBS, FinishedRounds


class SlowEngine:
    """An engine whose rounds take ``step_s`` a call: ``chunks`` calls of packing, then as
    many of parking, then the round is over."""

    def __init__(self, chunks: int, step_s: float) -> None:
        self.left = {"pack": chunks, "park": chunks}
        self.step_s = step_s
        self.limits: list[int] = []
        self.expired = 0

    def start_packing(self) -> None:
        pass

    start_parking = start_packing

    def _step(self, kind: str, limit: int) -> bool:
        if not self.left[kind]:  # the next rounds find nothing left
            return False
        self.limits.append(limit)
        end = time.perf_counter() + self.step_s
        while time.perf_counter() < end:
            pass
        self.left[kind] -= 1
        return self.left[kind] > 0

    def pack_finished(self, limit: int) -> bool:
        return self._step("pack", limit)

    def park_waiting(self, limit: int) -> bool:
        return self._step("park", limit)

    def expire_volatile(self, retention, now_ms) -> None:
        self.expired += 1


def run_rounds(engine: SlowEngine, seconds: float) -> float:
    """Run the rounds for ``seconds``; the longest the loop went without running a timer
    due every millisecond."""
    loop = uvloop.new_event_loop()
    driver = SimpleNamespace(loop=loop, wall_ms=lambda: 0)
    rounds = FinishedRounds(driver, SimpleNamespace(engine=engine, retention=None),
                            interval_s=0.01, slice_s=0.005)

    async def run() -> float:
        rounds.start()
        longest, end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            longest = max(longest, time.perf_counter() - before)
        rounds.stop()
        return longest

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def test_slow_jobs_are_taken_in_time_slices_with_the_loop_turning_between():
    engine = SlowEngine(chunks=150, step_s=0.001)  # 150 ms of packing, then of parking
    longest = run_rounds(engine, 0.8)
    assert engine.left == {"pack": 0, "park": 0} and engine.expired >= 1
    assert set(engine.limits) == {CHUNK_JOBS}
    # a slice ends at the first chunk past 5 ms: the loop waits ~6 ms, not 150
    assert longest < 0.05


def test_a_round_of_quick_jobs_goes_on_in_one_callback():
    engine = SlowEngine(chunks=40, step_s=0.0)
    run_rounds(engine, 0.05)
    assert engine.left == {"pack": 0, "park": 0}
    assert engine.expired >= 2  # rounds went on every 10 ms

"""The event loop's watch (tay.server.loop_watch) on real loops: the lag of every beat, and a
stall counted, logged once with where the loop thread was, and shown in ``status``."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import uvloop

from tay.admin.render import render_status
from tay.server.loop_watch import LoopWatch, short_path
from tay.server.metrics import LATENCY_BUCKETS, Histogram

def line_of(marker: str) -> int:
    with open(__file__) as source:
        return next(n for n, line in enumerate(source, 1)
                    if line.rstrip().endswith(marker) and "line_of" not in line)


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def hold_the_loop(seconds: float) -> None:
    """Keeps the loop thread busy in Python (where a sample finds it by name)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


HOLD_LINE = hold_the_loop.__code__.co_firstlineno + 3  # the busy loop's line
STEP_LINE = line_of("# STEP_LINE")
RUN_LINE = line_of("# RUN_LINE")


def watch_while(make_loop, steps, stall_s=0.1, beat_s=0.02, log_every_s=0.0):
    """Run ``steps`` (callables taking the watch, run one after another with the loop
    turning between them) under a started watch; the stopped watch and its histogram."""
    loop = make_loop()
    lag = Histogram(LATENCY_BUCKETS)
    watch = LoopWatch(loop, lag, stall_s, beat_s=beat_s, log_every_s=log_every_s,
                      wall_ms=lambda: 1_700_000_000_000)

    async def run() -> None:
        watch.start()
        for step in steps:
            await asyncio.sleep(0.12)  # beats on time between the steps
            step(watch)  # RUN_LINE
        await asyncio.sleep(0.12)
        watch.stop()

    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    return watch, lag


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_held_loop_is_one_stall_logged_with_where_it_was(kind, caplog):
    caplog.set_level(logging.WARNING, logger="tay.server")
    watch, lag = watch_while(LOOPS[kind], [lambda _: hold_the_loop(0.7)])  # STEP_LINE
    assert watch.stalls == 1
    assert 0.55 <= watch.longest_s < 2.0
    assert watch.last_stall["seconds"] == pytest.approx(watch.longest_s, abs=1e-6)
    assert watch.last_stall["at"] == 1_700_000_000_000
    # the loop thread itself was busy: its CPU in the stall is most of the stall
    assert watch.last_stall["loop_cpu_s"] >= 0.5 * watch.last_stall["seconds"]
    assert "hold_the_loop" in watch.last_stall["where"]
    assert watch.last_stall["where"].startswith("server/test_loop_watch.py:")
    # every beat went into the histogram: the stall in a bucket of its own, the rest under it
    assert lag.count >= 5
    assert sum(lag.counts[LATENCY_BUCKETS.index(0.5):]) == 1
    assert lag.total >= 0.55
    stall_lines = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(stall_lines) == 1
    # sampled at 1, 2 and 4 times the threshold, each in the holding function, called by
    # the step's lambda from the coroutine; the loop's own frames are left out
    samples = [line for line in stall_lines[0].splitlines()[1:] if "beside it" not in line]
    assert len(samples) >= 3
    for sample in samples:
        assert sample.split(" in: ")[1].split(" <- ") == [
            f"server/test_loop_watch.py:{HOLD_LINE} hold_the_loop",
            f"server/test_loop_watch.py:{STEP_LINE} <lambda>",
            f"server/test_loop_watch.py:{RUN_LINE} run"]
    assert "threshold 0.100 s" in stall_lines[0]


def test_a_loop_that_waits_shows_little_cpu_and_the_busy_thread_beside_it(caplog):
    """The loop thread blocks (no CPU of its own) while another thread spins in Python: the
    stall reports the loop's CPU far under its length, and names the busy thread."""
    import threading

    caplog.set_level(logging.WARNING, logger="tay.server")
    stop = threading.Event()

    def spin_beside() -> None:
        while not stop.is_set():
            hold_the_loop(0.01)

    helper = threading.Thread(target=spin_beside, name="busy-helper", daemon=True)
    helper.start()
    try:
        watch, _ = watch_while(uvloop.new_event_loop, [lambda _: time.sleep(0.6)])
    finally:
        stop.set()
        helper.join()
    assert watch.stalls == 1
    stall = watch.last_stall
    assert stall["seconds"] >= 0.45 and stall["loop_cpu_s"] < stall["seconds"] / 3
    assert stall["where"].endswith(" <lambda>")  # time.sleep is C: its caller is the frame
    line = next(r.getMessage() for r in caplog.records if "stalled" in r.getMessage())
    assert f"of which the loop thread ran {stall['loop_cpu_s']:.3f} s" in line
    # threads of other tests may be there too (a reader blocked in a C call is not idle)
    beside = [text for text in line.splitlines() if "beside it, busy-helper: " in text]
    assert beside
    assert all("hold_the_loop" in text and "spin_beside" in text for text in beside)
    assert "tay-loop-watch" not in line  # the sampler leaves itself out


def test_an_idle_loop_has_no_stall_and_no_sample(caplog):
    caplog.set_level(logging.WARNING, logger="tay.server")
    watch, lag = watch_while(uvloop.new_event_loop, [lambda _: hold_the_loop(0.03)] * 3)
    assert watch.stalls == 0 and watch.longest_s == 0.0 and watch.last_stall is None
    assert watch._samples == []
    assert lag.count >= 10
    assert not [r for r in caplog.records if "stalled" in r.getMessage()]


def test_stalls_between_log_lines_are_counted_in_the_next_one(caplog):
    caplog.set_level(logging.WARNING, logger="tay.server")

    def an_hour_later(watch) -> None:
        watch._logged_mono = float("-inf")  # the next stall may be logged again
        hold_the_loop(0.12)

    watch, _ = watch_while(uvloop.new_event_loop,
                           [lambda _: hold_the_loop(0.12)] * 3 + [an_hour_later],
                           stall_s=0.05, log_every_s=3600)
    assert watch.stalls == 4
    lines = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(lines) == 2
    assert "more stall" not in lines[0]
    assert "2 more stall(s) since the last line" in lines[1]


def test_threshold_zero_counts_lag_only_and_starts_no_thread():
    watch, lag = watch_while(uvloop.new_event_loop, [lambda _: hold_the_loop(0.3)], stall_s=0)
    assert watch.stalls == 0 and watch.last_stall is None
    assert lag.counts[LATENCY_BUCKETS.index(0.5)] == 1  # the lag is still observed
    assert watch._sampler is None


def test_stop_ends_the_sampler_thread():
    watch, _ = watch_while(uvloop.new_event_loop, [])
    assert watch._sampler is None and watch._stopping.is_set()
    import threading

    assert not [t for t in threading.enumerate() if t.name == "tay-loop-watch"]


def test_short_path_keeps_the_package_path():
    assert short_path("/x/lib/python3.11/site-packages/uvloop/__init__.py") == \
        "uvloop/__init__.py"
    assert short_path("/home/u/clone/tay/engine/core.py") == "tay/engine/core.py"
    assert short_path("/home/u/tay/checkout/tay/engine/core.py") == "tay/engine/core.py"
    assert short_path("/usr/lib/python3.11/asyncio/events.py") == "asyncio/events.py"


def test_status_shows_the_loop():
    base = {"tay_version": "x", "started_at": 0, "uptime_s": 1.0, "durability": "sync",
            "data_dir": "/d", "writer": {"running": True, "error": None,
                                        "implementation": "c", "rt_priority": 0},
            "storage": {"store_bytes": 1, "files": 1, "free_bytes": 1},
            "commit": {"events": 0, "batches": 0, "fsyncs": 0}}
    quiet = {"beat_s": 0.1, "stall_threshold_s": 0.5, "stalls": 0, "longest_stall_s": 0.0,
             "last_stall": None}
    assert "no stall over 0.5 s" in render_status({**base, "loop": quiet})
    stalled = {**quiet, "stalls": 2, "longest_stall_s": 1.25,
               "last_stall": {"at": 1_700_000_000_000, "seconds": 0.75,
                              "where": "tay/engine/core.py:12 apply"}}
    text = render_status({**base, "loop": stalled})
    assert "2 stall(s) over 0.5 s, longest 1.250 s; last 2023-11-14 22:13:20Z, 0.750 s in " \
           "tay/engine/core.py:12 apply" in text
    off = {**quiet, "stall_threshold_s": 0.0}
    assert "not watched (--loop-stall-ms 0)" in render_status({**base, "loop": off})

"""What retained jobs cost the cycle collector and memory: jobs kept live (run through the
engine), the same jobs packed as a running server packs the finished ones, and recovered
from the store (held in columns or rows).

Usage:
    .venv/bin/python -m benchmarks.retained_state [--jobs 100000] [--runs 3]
        [--shapes success,backlog]

Each shape (``benchmarks.tail_restart``'s, every job of it) is run through a Store-v2
engine in process (its default retained-state budget, 256 MiB of charges, refuses the
enqueues past what it holds: the table reports the jobs retained) (``tests.engine.test_tail_columns.tail_driver``: the engine's own
commands), the collector off meanwhile. Then, and again after its records are written to a
store under the bench scratch (``tay.bench.paths``) and recovered as ``tay serve`` recovers
them (``recover_engine``, the live engine dropped first), it reports per retained job the
objects the cycle collector tracks and the memory held (``tracemalloc``), and what the
jobs add to the pause of a full collection (``gc.collect(2)``, the least of ``--runs``,
less the least before they were built). ``tay serve`` freezes what
recovery built (``gc.freeze``), so a recovered engine costs its collections nothing; what
it builds afterwards, every job a producer enqueues while it serves, is walked by every
full collection for as long as the job is retained.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHAPES = ("success", "backlog")


def measure(build, runs: int) -> tuple[dict, object]:
    """Build the engine ``build()`` returns with the collector off: the jobs it retains,
    the tracked objects and the memory it added per retained job, what they add to the
    least full-collection pause over ``runs``, and the engine."""
    gc.collect()
    tracked = len(gc.get_objects())
    before = _least_pause(runs)
    tracemalloc.start()
    held = build()
    gc.collect()  # the young tuples of atoms untracked, the garbage freed
    gc.collect()
    memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    added = len(gc.get_objects()) - tracked
    jobs = max(1, len(held.jobs) + len(held.finished))
    return {"jobs": jobs, "tracked": added / jobs, "pause_ms": (_least_pause(runs) - before) * 1000,
            "memory": memory / jobs}, held


def _least_pause(runs: int) -> float:
    """The least time of ``runs`` full collections (seconds)."""
    pauses = []
    for _ in range(runs):
        started = time.perf_counter()
        gc.collect(2)
        pauses.append(time.perf_counter() - started)
    return min(pauses)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    return parser


def main(argv: list[str] | None = None) -> int:
    from benchmarks.tail_restart import checked_args, shape_actions

    args = checked_args(build_parser(), argv, SHAPES, ("jobs", "runs"))
    shapes = args.shapes
    from tests.engine.test_lazy_rows import recovered
    from tests.engine.test_tail_columns import journal_frames, tail_driver
    from tests.storage.conftest import scratch_path
    from tests.storage.test_base_columns import write_store

    print(f"{args.jobs:,} jobs of each shape (those the engine's default budget retains), "
          f"least of {args.runs} full collections")
    print("| shape | way | jobs retained | tracked objects per job "
          "| added to a full collection (ms) | per 1,000 jobs (ms) | memory per job (B) |")
    print("|---|---|---|---|---|---|---|")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for shape in shapes:
            actions = shape_actions(shape, args.jobs, 1)

            def live():
                driver = tail_driver(0, actions)
                driver.journal.clear()  # the harness's copy of the records, not the engine's
                return driver.engine

            def packed():
                """Live, then packed as ``tay serve``'s packer does (tay.engine.retained.packed)."""
                engine = live()
                engine.start_packing()
                for _ in range(2):  # the first round takes what finished before it began
                    while engine.pack_finished(1 << 30):
                        pass
                return engine

            root = scratch_path("retained-state")
            try:
                figures = {}
                figures["live"], engine = measure(live, args.runs)
                del engine
                figures["packed"], engine = measure(packed, args.runs)
                del engine
                # the same engine's records (the driver is deterministic), written as a tail
                write_store(root, journal_frames(tail_driver(0, actions)), compact=False)
                figures["recovered"], engine = measure(lambda: recovered(root), args.runs)
                del engine
            finally:
                shutil.rmtree(root, ignore_errors=True)
            for way, f in figures.items():
                print(f"| {shape} | {way} | {f['jobs']:,} | {f['tracked']:.2f} "
                      f"| {f['pause_ms']:.1f} | {f['pause_ms'] * 1000 / f['jobs']:.2f} "
                      f"| {f['memory']:,.0f} |", flush=True)
    finally:
        if enabled:
            gc.enable()
    return 0


if __name__ == "__main__":
    sys.exit(main())

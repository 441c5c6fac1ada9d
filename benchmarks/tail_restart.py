"""Restart of a Store-v2 tail by the shape of its jobs: what failures, retries and delays
cost the replay, beside a tail of plain successes.

Usage:
    .venv/bin/python -m benchmarks.tail_restart [--jobs 10000] [--every 10] [--runs 5]
        [--shapes success,failed,discarded,retried,delayed,delayed-failed,timed-out,waiting,
                  backlog,valued,cancelled,minutely,operated]
        [--base]

Each shape is a tail of ``--jobs`` jobs behind an empty base, written by a Store-v2
engine (``tests.engine.test_tail_columns.tail_frames``: the engine's own records for
enqueues, starts, reports, clock moves and ticks) with the reference job's nil success,
except every ``--every``-th job:

* ``success``: none (every job inserted, started, its nil result, finished);
* ``failed``: its first attempt failed by the worker, left retryable (its retry not run);
* ``discarded``: the same with no retry left (``retries=0``, as the reference profile);
* ``retried``: failed once, then its retry ran and succeeded (eight records; the retries
  of each hundred jobs run after them, a clock move past the first retry window apart);
* ``delayed``: inserted with a 300 ms delay, made available by the tick after a clock
  move and then run to success;
* ``delayed-failed``: inserted with a 300 ms delay and no retry (``retries=0``), made
  available by the tick after a clock move, then failed by the worker (discarded);
* ``timed-out``: inserted with a 500 ms timeout and no retry, started, then timed out by
  the engine's tick after a clock move (discarded, no details);
* ``waiting``: inserted with an hour's delay, still scheduled at the end of the tail;
* ``backlog``: inserted for a task no worker runs, still available at the end (with
  ``--every 1``, a tail or base that is all backlog);
* ``valued``: its success carries a value (``{"ok": 1}``) instead of nil;
* ``cancelled``: inserted for a task no worker runs, then cancelled by its producer;
* ``minutely``: a success, then a minute passes as a daemon's does: an every-minute
  schedule (declared first) delivers a job, which runs to its nil success, and the day's
  totals are recorded (a (32,2), as the server does every minute); each odd job adds an
  occurrence's job (four records, held in columns as any success) and two records of no
  job (the delivery (11,2) and the day's totals, replayed exactly).
* ``operated``: an operator's steering: inserted with a minute's delay, run now by an
  operator's retry (an expedite, (27,2)), run to success, then deleted by hand (a (29,2));
  the job is replayed exactly, the jobs around it held as any success (fewer jobs are
  left: the deleted ones are gone).

With ``--base`` the store is compacted offline first, so its jobs are snapshots in the
base (a finished job in columns with its result and failure's details, a waiting one,
such as a scheduled, backlog or retryable job, as its row among them, with its failure's
details), and "record by record" is the base without its columnar runs.

The store is recovered in process as ``tay serve`` recovers it (``recover_engine``, not
activated), ``--runs`` times; the least CPU (user+sys of this process) is reported, with
the same store recovered record by record (without the columnar tail walk) beside it,
the jobs the engine holds as rows or columns rather than built, and what each odd job
adds over the success tail's cost per job. The tail is rewritten under the bench scratch
(``tay.bench.paths``) and removed after.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHAPES = ("success", "failed", "discarded", "retried", "delayed", "delayed-failed", "timed-out",
          "waiting", "backlog", "valued", "cancelled", "minutely", "operated")


def shape_actions(shape: str, jobs: int, every: int) -> list:
    """``tail_driver`` actions of one shape (a worker of capacity 3 takes each job as it is
    enqueued; ``("finish", 0, ...)`` reports on the one it runs)."""
    actions: list = [("schedule",)] if shape == "minutely" else []
    odd_jobs = 0
    for n in range(jobs):
        odd = shape != "success" and n % every == every - 1
        odd_jobs += odd
        if shape in ("delayed", "waiting") and odd:
            actions.append(("enqueue", "a", 300 if shape == "delayed" else 3_600_000, {}))
        elif shape == "delayed-failed" and odd:
            actions.append(("enqueue", "a", 300, {}, 0))
        elif shape == "timed-out" and odd:  # running at once, timed out by the next tick
            actions += [("enqueue", "a", None, {}, 0, 500), ("advance", 1000)]
        elif shape == "operated" and odd:  # run now by hand, then deleted by hand
            actions += [("enqueue", "a", 60_000, {}), ("retry", n), ("finish", 0, "nil"),
                        ("delete", n)]
        elif shape in ("backlog", "cancelled") and odd:  # a task no worker runs
            actions.append(("enqueue", "z", None, {}))
            if shape == "cancelled":
                actions.append(("cancel", n))
        else:
            actions.append(("enqueue", "a", None, {},
                            0 if shape == "discarded" and odd else 1))
            actions.append(("finish", 0, "nil" if not odd or shape == "minutely"
                            else "value" if shape == "valued" else "failed"))
            if shape == "minutely" and odd:  # the occurrence, delivered by the tick
                actions += [("advance", 60_000), ("finish", 0, "nil"), ("days",)]
        if shape in ("retried", "delayed", "delayed-failed") \
                and (n % 100 == 99 or n == jobs - 1) and odd_jobs:
            # the retries (or delayed jobs) of these jobs come due and run, one by one
            actions.append(("advance", 2500))
            actions += [("finish", 0, "failed" if shape == "delayed-failed" else "nil")] \
                * odd_jobs
            odd_jobs = 0
    return actions


def measure(frames: list, runs: int, base: bool = False) -> dict:
    """Recover a store whose tail is ``frames`` (``base``: compacted into its base first):
    least CPU with the columnar walk and record by record, and how many jobs the engine
    holds unbuilt."""
    from tay._native._pure_tail import OF_NO_JOB
    from tay.engine.retained.jobs import LazyJobEntry
    from tests.engine.test_lazy_rows import recovered
    from tests.engine.test_tail_columns import record_by_record
    from tests.storage.conftest import scratch_path
    from tests.storage.test_base_columns import record_by_record as base_record_by_record
    from tests.storage.test_base_columns import write_store

    root = scratch_path("tail-restart")
    options = {}
    if base and any(rtype == 30 and payload[0] in OF_NO_JOB for rtype, _, payload in frames):
        # a schedule's or a day's events: only an engine carries them into a base (a job
        # table refuses them)
        from tay.engine.config import EngineConfig
        from tay.engine.core import Engine
        options["consumer"] = Engine(EngineConfig())
    try:
        write_store(root, frames, compact=base, **options)
        figures: dict = {}
        for way, replay in (("columnar", contextlib.nullcontext),
                            ("record by record",
                             base_record_by_record if base else record_by_record)):
            used = []
            for _ in range(runs):
                gc.collect()
                started = time.process_time()
                with replay():
                    engine = recovered(root)
                used.append(time.process_time() - started)
                if "held" not in figures:  # the columnar engine's jobs, counted once
                    figures["held"] = len(engine.finished) + sum(
                        type(entry) is LazyJobEntry for entry in engine.jobs.values())
                    figures["jobs"] = len(engine.finished) + len(engine.jobs)
                del engine
            figures[way] = min(used)
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=10,
                        help="every Nth job is odd (1: every job)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--base", action="store_true",
                        help="compact the store first: the jobs are replayed from its base")
    return parser


def checked_args(parser: argparse.ArgumentParser, argv: list[str] | None,
                 known: tuple[str, ...], positive: tuple[str, ...]) -> argparse.Namespace:
    """``parser``'s arguments, ``--shapes`` split into a list; a shape not in ``known``, or
    a ``positive`` flag below 1, is refused as argparse refuses a bad flag."""
    args = parser.parse_args(argv)
    args.shapes = args.shapes.split(",")
    unknown = [shape for shape in args.shapes if shape not in known]
    if unknown or any(getattr(args, name) < 1 for name in positive):
        parser.error(f"--shapes from {', '.join(known)}; "
                     + ", ".join(f"--{name} >= 1" for name in positive)
                     + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    return args


def main(argv: list[str] | None = None) -> int:
    args = checked_args(build_parser(), argv, SHAPES, ("jobs", "every", "runs"))
    shapes = args.shapes
    from tests.engine.test_tail_columns import tail_frames

    print(f"{args.jobs:,} jobs, one in {args.every} odd, least CPU of {args.runs} runs"
          + (", from the base (records: the tail compacted into it)" if args.base else ""))
    print("| shape | records | jobs held unbuilt | recovery CPU (s) | record by record (s) "
          "| added per odd job (us) |")
    print("|---|---|---|---|---|---|")
    base = None
    for shape in shapes:
        frames = tail_frames(0, shape_actions(shape, args.jobs, args.every))
        figures = measure(frames, args.runs, args.base)
        occurrences = args.jobs // args.every if shape == "minutely" else 0
        deleted = args.jobs // args.every if shape == "operated" else 0
        assert figures["jobs"] == args.jobs + occurrences - deleted, figures
        if shape == "success":
            base = figures["columnar"]
        odd = args.jobs // args.every
        added = "-" if base is None or shape == "success" \
            else f"{(figures['columnar'] - base) / odd * 1e6:,.1f}"
        print(f"| {shape} | {len(frames):,} | {figures['held']:,} | {figures['columnar']:.4f} "
              f"| {figures['record by record']:.4f} | {added} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

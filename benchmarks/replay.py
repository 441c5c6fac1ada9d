"""Cold-restart benchmark: recovery of a reference store of N completed jobs.

Usage:
    .venv/bin/python benchmarks/replay.py [--jobs 10000] [--repeat 3] [--profile MODE]

Builds the reference store once through the real journal (``durability="write"``: the
bytes are identical to strict sync mode, only the fsync barriers are skipped, so building
is quick) under the bench scratch (``tay.bench.paths``), with the storage event builders:
per job ``job_inserted``, ``job_started``, ``job_finished`` (success), args
``{"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}``.

Then, each in a fresh subprocess (so imports, caches and RSS are cold), it measures:

* ``physical``: the recovery passes only (consumer ignores every record);
* ``table``: recovery + the storage ``TableConsumer`` (decode + ``transitions.apply``);
* ``engine``: recovery + ``Engine.consume_event`` (batch path) + ``Engine.finish_recovery``.

Each line reports the wall time of recovery (best of ``--repeat`` fresh processes) and the
peak RSS of that process (``ru_maxrss``, imports included). ``--profile MODE`` prints a
cProfile of one run of MODE instead.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tay.bench.paths import bench_scratch  # noqa: E402 (after the path)

SCRATCH = bench_scratch()  # strict sync accepts it wherever the checkout is
MODES = ("physical", "table", "engine")
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
BATCH_JOBS = 1000


def job_id(index: int) -> bytes:
    return (index + 1).to_bytes(16, "big")


def job_events(index: int, at: int) -> list:
    """The three events of one completed reference job (sequences 3i+1 .. 3i+3)."""
    from tay.storage import events as ev
    from tay.storage.events.definition import build_definition

    first = 3 * index + 1
    ident = job_id(index)
    definition = build_definition(worker_key="benchmark", queue_key="default", args=ARGS)
    return [
        (first, ev.job_inserted(ident, at, definition)),
        (first + 1, ev.job_started(ident, at + 1, first, 1, first)),
        (first + 2, ev.job_finished(ident, at + 2, first + 1, execution_token=first + 1,
                                    outcome=ev.SUCCESS, diagnostic_code=None,
                                    disposition=ev.COMPLETED)),
    ]


def build_store(path: Path, jobs: int) -> None:
    """Write the reference store through ``init_store`` + ``recover`` + ``append_batch``."""
    from tay.storage import events as ev
    from tay.storage.journal.writer import init_store
    from tay.storage.recovery.recover import recover

    init_store(str(path), durability="write")
    journal = recover(str(path), consumer=lambda *a: None, durability="write").journal
    at = 1_700_000_000_000
    for start in range(0, jobs, BATCH_JOBS):
        batch = []
        for index in range(start, min(start + BATCH_JOBS, jobs)):
            for sequence, event in job_events(index, at + 3 * index):
                batch.append((sequence, event.type, event.schema, ev.encode_event(event)))
        journal.append_batch(batch)
    journal.close()


def run_mode(mode: str, path: str) -> tuple[float, int]:
    """One recovery of ``path`` in ``mode``: (seconds, records replayed)."""
    from tay.storage.recovery.recover import TableConsumer, recover

    started = time.perf_counter()
    if mode == "physical":
        done = recover(path, consumer=lambda *a: None, activate=False)
    elif mode == "table":
        done = recover(path, consumer=TableConsumer(), activate=False)
        assert len(done.consumer.table) * 3 == done.records_replayed
    else:
        from tay.engine import Engine

        engine = Engine()
        done = recover(path, consumer=engine, activate=False)
        engine.finish_recovery(int(time.time() * 1000), int(time.monotonic() * 1000))
        assert len(engine.jobs) * 3 == done.records_replayed
    return time.perf_counter() - started, done.records_replayed


def child(mode: str, path: str) -> None:
    seconds, records = run_mode(mode, path)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{seconds:.6f} {records} {peak_kb}")


def measure(mode: str, path: Path, repeat: int) -> tuple[float, int, int]:
    """Best wall time over ``repeat`` fresh processes, with that run's peak RSS in KiB."""
    best: tuple[float, int, int] | None = None
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--child", mode, str(path)],
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
        seconds, records, peak = out.split()
        row = (float(seconds), int(records), int(peak))
        if best is None or row[0] < best[0]:
            best = row
    assert best is not None
    return best


def profile(mode: str, path: Path) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(run_mode, mode, str(path))
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", choices=MODES)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(*options.child)
        return
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / f"replay-bench-{uuid.uuid4().hex}"
    try:
        started = time.perf_counter()
        build_store(path, options.jobs)
        size = sum(f.stat().st_size for f in (path / "segments").iterdir())
        print(f"store: {options.jobs} jobs, {3 * options.jobs} records, {size / 1e6:.1f} MB, "
              f"built in {time.perf_counter() - started:.1f} s (durability=write)")
        if options.profile:
            profile(options.profile, path)
            return
        from tay import _native

        print(f"native: {_native.IMPLEMENTATION}")
        for mode in MODES:
            seconds, records, peak_kb = measure(mode, path, options.repeat)
            print(f"{mode:9s} {seconds * 1000:8.1f} ms  {records / seconds:10.0f} records/s  "
                  f"peak RSS {peak_kb / 1024:6.1f} MB")
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()

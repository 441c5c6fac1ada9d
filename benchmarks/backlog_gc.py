"""A backlog and the cycle collector: what a full collection costs with many jobs waiting,
with and without the server's parking rounds (tay.engine.retained.jobs.ParkedJobEntry).

    .venv/bin/python -m benchmarks.backlog_gc [--jobs 100000] [--repeat 5] [--dir DIR]

A real store is opened the way ``tay serve`` opens it (``benchmarks.engine_path``'s
engine: Store v2, no fsync), and ``--jobs`` reference-shape jobs (1 KiB of args) are
enqueued on a queue no worker takes, so they all wait. Then, once as they are and once
after the parking rounds a running server makes (``park_waiting``, 1,024 jobs a slice, as
tay.server.finished_rounds does), it reports: the objects the cycle collector tracks per
waiting job, the least and median time of ``--repeat`` full collections (``gc.collect()``,
what stops the loop when CPython decides a full collection is due), the process's RSS,
the CPU the rounds took per job, and the CPU per job of dispatching the backlog (its first
50,000 jobs) to one worker afterwards (a parked job is built again at its dispatch).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.engine_path import ARGS, NOW, TASK  # noqa: E402
from tay.bench.paths import bench_scratch  # noqa: E402

SLICE_JOBS = 32  # tay.server.finished_rounds.CHUNK_JOBS
DISPATCHED = 50_000  # at most this many are dispatched (one worker, its capacity)


def open_backlog_engine(data_dir: str, credits: int):
    """``benchmarks.engine_path``'s engine with a state budget the whole backlog fits in
    (serve's 256 MiB default holds about 39,000 jobs of this shape) and as many credits as
    jobs, so that one worker takes them all at once."""
    from tay.engine.config import EngineConfig
    from tay.server.app import ServeConfig, open_store

    return open_store(ServeConfig(
        data_dir=data_dir, socket=None, init_if_missing=True, durability="write",
        validated_filesystem=True, engine=EngineConfig(queues={"alpha": credits},
                                                        max_state_bytes=4 << 30)))


def rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def run(jobs: int, park: bool, repeat: int, directory: str) -> dict:
    from tay.engine import commands as c
    from tay.engine.effects import Execute

    root = tempfile.mkdtemp(prefix="backlog-gc-", dir=directory)
    store = open_backlog_engine(os.path.join(root, "data"), min(jobs, DISPATCHED))
    try:
        engine = store.engine
        clock = [NOW, 0]

        def handle(command):
            clock[0] += 1
            clock[1] += 1
            return engine.handle(command, clock[0], clock[1])

        producer, worker = object(), object()
        handle(c.Connect(producer, "client", "bench-producer", 0, None, "hp"))
        engine.start_parking()
        gc.collect()
        base_objects = len(gc.get_objects())
        base_rss = rss_mib()
        refused = 0
        for index in range(jobs):
            out = handle(c.DecodedEnqueue(producer, f"e{index}", TASK, dict(ARGS),
                                          {"queue": "alpha"}))
            refused += any(type(e).__name__ == "Refuse" for e in out.effects)
        waiting = jobs - refused
        park_cpu = 0.0
        if park:
            cpu = time.thread_time()
            for _ in range(2):  # the round in progress ends; the next one takes them all
                while engine.park_waiting(SLICE_JOBS):
                    pass
            park_cpu = time.thread_time() - cpu
        engine.execute_args.__init__(engine._may_dispatch)  # its 1 MiB of args is no backlog
        gc.collect()
        tracked = (len(gc.get_objects()) - base_objects) / waiting
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            gc.collect()
            times.append(time.perf_counter() - started)
        rss = rss_mib() - base_rss
        cpu = time.thread_time()
        handle(c.Connect(worker, "worker", "bench-worker", min(waiting, DISPATCHED), None,
                         "hw"))
        out = handle(c.RegisterTasks(worker, (TASK,), "rt"))
        dispatched = sum(type(e) is Execute for e in out.effects)
        dispatch_cpu = time.thread_time() - cpu
        return {"waiting": waiting, "tracked_per_job": tracked,
                "full_gc_ms_min": min(times) * 1e3, "full_gc_ms_median":
                statistics.median(times) * 1e3, "rss_mib": rss,
                "park_us_per_job": park_cpu / waiting * 1e6,
                "dispatched": dispatched,
                "dispatch_us_per_job": dispatch_cpu / max(dispatched, 1) * 1e6}
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=str(bench_scratch()),
                        help="where the throw-away stores go (default: the bench scratch)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        build_parser().error("--jobs and --repeat must be positive")
    os.makedirs(args.dir, exist_ok=True)
    print("| backlog | waiting jobs | tracked objects / job | full collection min / median "
          "(ms) | RSS (MiB) | parking CPU / job (us) | dispatch CPU / job (us) |")
    print("|---|---|---|---|---|---|---|")
    for park in (False, True):
        row = run(args.jobs, park, args.repeat, args.dir)
        assert row["dispatched"] == min(row["waiting"], DISPATCHED), row
        print(f"| {'parked' if park else 'as enqueued'} | {row['waiting']:,} | "
              f"{row['tracked_per_job']:.2f} | {row['full_gc_ms_min']:.1f} / "
              f"{row['full_gc_ms_median']:.1f} | {row['rss_mib']:.1f} | "
              f"{row['park_us_per_job']:.2f} | {row['dispatch_us_per_job']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The engine's CPU per job on the reference shape, without the server around it.

    .venv/bin/python -m benchmarks.engine_path [--jobs 5000] [--store v2|v1] [--dir DIR]
        [--rounds 5] [--profile out.prof]

A real store is opened the way ``tay serve`` opens it (recovery, the Store-v2 epoch or the
v1 journal, the history budget attached); then only the engine runs: per job the three
commands the socket path hands it (``DecodedEnqueue``, ``Started``, ``Succeeded``), each followed
by what the driver asks of the engine after every command (``journal_records`` of the
outcome's events, ``next_wakeup``). Nothing is written to the journal: this is the engine's
share of ``benchmarks/server_path.py``, measured without the loop, the protocol and the
writer, so that a change to the engine shows as itself. Eight enqueues are handed in at a
time over queues ``alpha``/``beta`` with two credits each, one worker of capacity 8.

Reported: process CPU per job (the minimum over rounds is the figure), and Python function
calls per job under the profiler when ``--profile`` is given.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from tay.bench.paths import bench_scratch

ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}
TASK = "tay.benchmark.v1"
IN_FLIGHT = 8
NOW = 1_800_000_000_000


def open_engine(data_dir: str, store_version: int):
    from tay.engine.config import EngineConfig
    from tay.server.app import ServeConfig, open_store
    from tay.storage.compaction.trigger import CompactionPolicy

    store = open_store(ServeConfig(
        data_dir=data_dir, socket=None, init_if_missing=True, durability="write",
        validated_filesystem=True, engine=EngineConfig(queues={"alpha": 2, "beta": 2}),
        compaction=CompactionPolicy(enabled=store_version == 2)))
    assert store.store_version == store_version, store.store_version
    return store


def run_jobs(engine, jobs: int) -> int:
    """Drive ``jobs`` jobs from enqueue to success; returns the commands handled."""
    from tay.engine import commands as c
    from tay.engine.effects import Execute
    from tay.storage.events import journal_records

    producer, worker = object(), object()
    commands = 0
    clock = [NOW, 0]

    def handle(command):
        nonlocal commands
        clock[0] += 1
        clock[1] += 1
        out = engine.handle(command, clock[0], clock[1])
        if out.events:
            journal_records(out.events)
        engine.next_wakeup()
        commands += 1
        return out.effects

    handle(c.Connect(producer, "client", "bench-producer", 0, None, "hp"))
    handle(c.Connect(worker, "worker", "bench-worker", 8, None, "hw"))
    handle(c.RegisterTasks(worker, (TASK,), "rt"))
    enqueues = [c.DecodedEnqueue(producer, os.urandom(16).hex(), TASK, dict(ARGS),
                          {"queue": "alpha" if index % 2 == 0 else "beta", "retries": 0})
                for index in range(jobs)]
    executes: list = []
    sent = done = 0
    while done < jobs:
        burst = enqueues[sent:sent + IN_FLIGHT]
        sent += len(burst)
        for command in burst:
            executes.extend(e for e in handle(command) if type(e) is Execute)
        while executes:
            execute = executes.pop(0)
            handle(c.Started(worker, execute.execution_id + "s", execute.reservation_id,
                             execute.execution_id))
            executes.extend(e for e in handle(c.Succeeded(
                worker, execute.execution_id + "d", execute.reservation_id,
                execute.execution_id, None)) if type(e) is Execute)
            done += 1
    return commands


def run_round(data_dir: str, jobs: int, store_version: int, profile: str | None) -> float:
    store = open_engine(data_dir, store_version)
    try:
        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile(time.thread_time)
            profiler.enable()
        cpu0 = time.thread_time()
        run_jobs(store.engine, jobs)
        cpu = time.thread_time() - cpu0
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
            import pstats

            calls = pstats.Stats(profile).total_calls
            print(f"profiled: {calls / jobs:,.0f} Python calls per job", file=sys.stderr)
    finally:
        store.close()
    return cpu / jobs * 1e6


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--store", choices=("v1", "v2"), default="v2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=str(bench_scratch()),
                        help="where the throw-away stores go (default: the bench scratch)")
    parser.add_argument("--profile", help="write a cProfile of one extra round here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    results = []
    for round_number in range(args.rounds + (1 if args.profile else 0)):
        root = tempfile.mkdtemp(prefix="engine-path-", dir=args.dir)
        profile = args.profile if round_number == args.rounds else None
        try:
            result = run_round(os.path.join(root, "data"), args.jobs, int(args.store[1]),
                               profile)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if profile is None:
            results.append(result)
    print(" ".join(f"{r:.1f}" for r in results), file=sys.stderr)
    print(f"engine {args.store}: {min(results):.1f} us/job (min of {len(results)} rounds of "
          f"{args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Soak through the serving path: reference-shape jobs through one long-lived engine, the
server's driver and committer in strict sync, and *online* compaction; is it bounded?

Usage:
    nice -n 10 flock /work/tools/bench.lock .venv/bin/python -m benchmarks.soak_online \
        [--jobs 1000000] [--jobs-per-hour 5000] [--retention 1h] [--batch 256] \
        [--sample-every 50000] [--history-bytes 64MiB] [--ratio 2.0] [--state-ratio 0.5] [--writer auto] \
        [--check-interval-s 2] [--deadline-s S] [--packer on|off] [--json FILE]

The sibling of ``benchmarks/soak.py`` (which ran offline compaction and rebuilt the engine
at each trigger). Here the parts are those of ``tay serve``, in process on one uvloop
loop: ``open_store`` (a new store, adopted to Store v2 at the first start, ``--terminal-
retention``), one ``EngineDriver`` with the store's committer (strict ``sync`` on a
validated filesystem, serve's default group commit: each batch the writer takes is one
fdatasync), and one ``OnlineCompactor`` started as serve starts it: its own timer checks
the history trigger (``--compact-history-bytes``/``--compact-ratio``) and the state trigger
(``--compact-state-ratio``) every ``check_interval_s`` and asks on state-budget refusals.
Nothing calls it by hand.

Clock: injected into the driver (the engine's wall and monotonic time) and the compactor
(the capture time retention is judged at); it moves ``3600 s / --jobs-per-hour`` per
enqueue, so terminal jobs older than ``--retention`` expire at each compaction. The
compactor's timer, backoff and budget cooldown stay in real time, as in serve.

A producer connection enqueues ``--batch`` jobs (replies arrive once durable), a worker
connection takes each ``Execute`` and reports success, awaited the same way; then the next
batch. Samples as in soak.py: jobs done, data directory bytes, RSS and RSS after
``malloc_trim``, state bytes, retained jobs, history bytes, compactions, refused enqueues;
and the cycle collector's full collections since the last sample (how many, the longest
and the total pause), with the finished jobs packed as serve packs them (``--packer``).
The store lives under the bench scratch (``tay.bench.paths``) and is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from benchmarks.soak import ARGS, QUEUES, T0, TASK, dir_bytes, parse_size, trimmed_rss  # noqa: E402
from tay.bench.paths import bench_scratch  # noqa: E402
from tay.engine import Execute, Refuse  # noqa: E402
from tay.engine import commands as c  # noqa: E402
from tay.engine.config import EngineConfig  # noqa: E402
from tay.server.app import ServeConfig, open_store  # noqa: E402
from tay.server.compaction.compactor import OnlineCompactor  # noqa: E402
from tay.server.driver import EngineDriver  # noqa: E402
from tay.server.metrics import ServerMetrics  # noqa: E402
from tay.server.finished_rounds import FinishedRounds  # noqa: E402
from tay.storage.compaction.trigger import CompactionPolicy  # noqa: E402
from tay.storage.v2.manifest import parse_retention  # noqa: E402

SCRATCH = bench_scratch()


class Clock:
    """The injected time: wall ms from T0, monotonic ms from 0; moved per enqueue."""

    def __init__(self, ms_per_job: float) -> None:
        self.offset = 0.0
        self.step = ms_per_job

    def wall(self) -> int:
        return T0 + int(self.offset)

    def mono(self) -> int:
        return int(self.offset)


class FullCollections:
    """The cycle collector's full collections (their pauses stop the loop), timed through
    ``gc.callbacks``; ``take`` returns (count, longest ms, total ms) since the last take."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._started = time.perf_counter()
            else:
                self.pauses.append((time.perf_counter() - self._started) * 1000)

    def take(self) -> tuple[int, float, float]:
        pauses, self.pauses = self.pauses, []
        return len(pauses), max(pauses, default=0.0), sum(pauses)


class OnlineSoak:
    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.clock = Clock(3_600_000 / args.jobs_per_hour)
        policy = CompactionPolicy(history_bytes=parse_size(args.history_bytes),
                                  ratio=args.ratio, state_ratio=args.state_ratio,
                                  check_interval_s=args.check_interval_s)
        self.config = ServeConfig(
            data_dir=str(root), socket=None, init_if_missing=True, durability="sync",
            validated_filesystem=True, journal_writer=args.writer,
            engine=EngineConfig(queues={q: 2 for q in QUEUES}),
            terminal_retention=parse_retention(args.retention), compaction=policy)
        self.batch = args.batch
        self.packing = args.packer == "on"
        self.refused: dict[str, int] = {}
        self.refusals: list[dict] = []
        self.compactions: list[dict] = []
        self.waiting: dict[str, Any] = {}  # request id -> what it answers
        self.executes: list[Execute] = []
        self.count = 0

    async def start(self) -> None:
        self.store = open_store(self.config)
        loop = asyncio.get_running_loop()
        self.driver = EngineDriver(self.store.engine, self.store.committer, loop,
                                   clock=(self.clock.wall, self.clock.mono))
        self.driver.attach("p", self._reply)
        self.driver.attach("w", self._worker)
        self.compactor = OnlineCompactor(self.driver, self.store, self.config, ServerMetrics(),
                                         clock=self.clock.wall)
        self.compactor.start()
        self.rounds = FinishedRounds(self.driver, self.store) if self.packing else None
        if self.rounds is not None:
            self.rounds.start()
        self.seen_report: Any = None
        await self.call(lambda rid: c.Connect("w", "worker", "soak-worker", self.batch * 2,
                                              None, rid))
        await self.call(lambda rid: c.RegisterTasks("w", (TASK,), rid))

    async def close(self) -> None:
        running = self.compactor._running
        if running is not None:  # let a compaction the trigger started finish: closing
            try:  # first would fail it as "stopped", which is not the soak's finding
                await asyncio.shield(running)
            except Exception:
                pass  # counted in last_failure
        if self.rounds is not None:
            self.rounds.stop()
        await self.compactor.close()
        self.driver.close()
        self.store.close()

    # -- replies ---------------------------------------------------------------------------
    def _reply(self, effect: Any) -> None:
        self._answered(effect)

    def _worker(self, effect: Any) -> None:
        if isinstance(effect, Execute):
            self.executes.append(effect)
        else:
            self._answered(effect)

    def _answered(self, effect: Any) -> None:
        entry = self.waiting.pop(effect.request_id, None)
        if entry is None:
            return
        index, future = entry
        if isinstance(effect, Refuse):
            error = effect.failure.wire_error()
            code = error.get("code", "refused")
            self.refused[code] = self.refused.get(code, 0) + 1
            if len(self.refusals) < 10:  # the first few in full, for the report
                self.refusals.append({"job_index": index, "at_ms": self.clock.wall(), **error})
        if not self.waiting and future is not None and not future.done():
            future.set_result(None)

    def _rid(self) -> str:
        self.count += 1
        return f"r{self.count}"

    async def call(self, command_of: Any) -> None:
        future = asyncio.get_running_loop().create_future()
        rid = self._rid()
        self.waiting[rid] = (None, future)
        self.driver.submit(command_of(rid))
        await asyncio.wait_for(future, 60)

    # -- the workload ----------------------------------------------------------------------
    async def run_batch(self, first_index: int, count: int) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        for index in range(first_index, first_index + count):
            rid = self._rid()
            self.waiting[rid] = (index, future)
            self.driver.submit(c.Enqueue("p", rid, TASK, ARGS,
                                         {"queue": QUEUES[index % 2], "retries": 0}))
            self.clock.offset += self.clock.step
        await asyncio.wait_for(future, 60)
        while self.executes:  # a success frees a slot: the next Execute arrives after it
            executes, self.executes = self.executes, []
            future = loop.create_future()
            for execute in executes:
                rid = self._rid()
                self.waiting[rid] = (None, future)
                self.driver.submit(c.Succeeded("w", rid, execute.reservation_id,
                                               execute.execution_id, None))
            await asyncio.wait_for(future, 60)
        report = self.compactor.last
        if report is not None and report is not self.seen_report:
            self.seen_report = report
            self.compactions.append({key: report.get(key) for key in (
                "trigger", "captured_at", "retained_jobs", "expired_jobs", "base_bytes",
                "bytes_before", "bytes_after", "duration_ms", "pause_ms",
                "catch_up_records", "reclaimed")})
            return self.compactions[-1]
        return None

    def history_bytes(self) -> int:
        return self.compactor.history_bytes()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak_online",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--jobs-per-hour", type=int, default=5_000)
    parser.add_argument("--retention", default="1h")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--sample-every", type=int, default=50_000)
    parser.add_argument("--history-bytes", default="64MiB")
    parser.add_argument("--ratio", type=float, default=2.0)
    parser.add_argument("--state-ratio", type=float, default=CompactionPolicy().state_ratio,
                        help="the state trigger (tay serve --compact-state-ratio)")
    parser.add_argument("--check-interval-s", type=float,
                        default=CompactionPolicy().check_interval_s,
                        help="real seconds between trigger checks (serve's: the default)")
    parser.add_argument("--writer", choices=("auto", "c", "python"), default="auto",
                        help="the journal writer (tay serve --journal-writer)")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="stop after this many seconds of wall time (reported)")
    parser.add_argument("--packer", choices=("on", "off"), default="on",
                        help="pack finished jobs as tay serve does (tay.server.finished_rounds)")
    parser.add_argument("--json", help="write the samples and compactions here")
    parser.add_argument("--keep", action="store_true", help="keep the store afterwards")
    return parser


async def soak(args: argparse.Namespace) -> dict:
    root = SCRATCH / f"soak-online-{uuid.uuid4().hex[:8]}" / "data"
    root.parent.mkdir(parents=True)
    run = OnlineSoak(root, args)
    process = psutil.Process()
    samples: list[dict] = []
    print(f"online soak: {args.jobs:,} jobs, {args.jobs_per_hour:,}/h simulated "
          f"({args.jobs / args.jobs_per_hour:.1f} h), retention {args.retention}, "
          f"batch {args.batch}, trigger {args.history_bytes} x {args.ratio}, "
          f"writer {args.writer}, store {root}", flush=True)
    wall0, cpu0 = time.monotonic(), process.cpu_times()
    print(f"{'jobs':>9} {'sim_h':>6} {'data_MB':>8} {'rss_MB':>7} {'trim_MB':>7} "
          f"{'state_MB':>8} {'retained':>8} {'hist_MB':>7} {'compact':>7} {'refused':>7} "
          f"{'wall_s':>7} {'cpu_us/job':>10} {'full_gcs':>8} {'gc_max_ms':>9} "
          f"{'gc_ms':>7}", flush=True)
    done = 0
    collections = FullCollections()
    gc.callbacks.append(collections)
    await run.start()
    gc.freeze()  # as tay serve freezes what start-up made (its modules, its recovery)
    try:
        while done < args.jobs:
            if args.deadline_s is not None and time.monotonic() - wall0 > args.deadline_s:
                print(f"deadline reached after {done:,} jobs", flush=True)
                break
            count = min(args.batch, args.jobs - done)
            row = await run.run_batch(done, count)
            done += count
            if row is not None:
                print(f"  compaction ({row['trigger']}) by {done:,}: kept "
                      f"{row['retained_jobs']:,}, expired {row['expired_jobs']:,}, base "
                      f"{row['base_bytes'] / 1e6:.1f} MB, {row['duration_ms']} ms (writes "
                      f"paused {row['pause_ms']:.1f} ms)", flush=True)
            if done // args.sample_every > (done - count) // args.sample_every \
                    or done == args.jobs:
                samples.append(sample(run, process, root, done, wall0, cpu0, collections))
    finally:
        if samples and samples[-1]["jobs"] != done and done:
            samples.append(sample(run, process, root, done, wall0, cpu0, collections))
        gc.callbacks.remove(collections)
        gc.unfreeze()
        await run.close()
        result = {"args": vars(args), "jobs_done": done, "samples": samples,
                  "compactions": run.compactions, "failures": run.compactor.last_failure,
                  "refused": run.refused, "refusals": run.refusals}
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        if not args.keep:
            shutil.rmtree(root.parent, ignore_errors=True)
    return result


def sample(run: OnlineSoak, process: Any, root: Path, done: int, wall0: float,
           cpu0: Any, collections: FullCollections) -> dict:
    cpu = process.cpu_times()
    used = cpu.user + cpu.system - cpu0.user - cpu0.system
    rss = process.memory_info().rss
    engine = run.store.engine
    row = {"jobs": done, "simulated_h": round(run.clock.offset / 3_600_000, 2),
           "data_dir_bytes": dir_bytes(root), "rss_bytes": rss,
           "rss_trimmed_bytes": trimmed_rss(process),
           "python_blocks": sys.getallocatedblocks(),
           "state_bytes": engine.budget.used, "retained_jobs": engine.job_count(),
           "packed_jobs": len(engine.finished.packed),
           "history_bytes": run.history_bytes(), "compactions": len(run.compactions),
           "refused": sum(run.refused.values()), "refused_by_code": dict(run.refused),
           "wall_s": round(time.monotonic() - wall0, 1),
           "cpu_us_per_job": round(used / done * 1e6, 1)}
    row["full_collections"], row["gc_max_ms"], row["gc_total_ms"] = collections.take()
    print(f"{done:>9,} {row['simulated_h']:>6.1f} {row['data_dir_bytes'] / 1e6:>8.1f} "
          f"{row['rss_bytes'] / 1e6:>7.1f} {row['rss_trimmed_bytes'] / 1e6:>7.1f} "
          f"{row['state_bytes'] / 1e6:>8.1f} {row['retained_jobs']:>8,} "
          f"{row['history_bytes'] / 1e6:>7.1f} {row['compactions']:>7} {row['refused']:>7} "
          f"{row['wall_s']:>7} {row['cpu_us_per_job']:>10} {row['full_collections']:>8} "
          f"{row['gc_max_ms']:>9.1f} {row['gc_total_ms']:>7.0f}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import uvloop  # the loop tay serve runs on

    result = uvloop.run(soak(args))
    print(f"jobs done: {result['jobs_done']:,}; compactions: {len(result['compactions'])}; "
          f"refused enqueues: {result['refused'] or 0}; last compaction failure: "
          f"{result['failures']}")
    for refusal in result["refusals"]:
        print(f"  {refusal}")
    return 0 if not result["refused"] and result["failures"] is None else 1


if __name__ == "__main__":
    sys.exit(main())

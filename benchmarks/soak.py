"""Soak: a million reference-shape jobs through the engine, journal and compaction, with a
terminal retention and a clock that moves; is the store bounded?

Usage:
    nice -n 10 flock /work/tools/bench.lock .venv/bin/python benchmarks/soak.py \
        [--jobs 1000000] [--jobs-per-hour 20000] [--retention 1h] [--batch 256] \
        [--sample-every 50000] [--history-bytes 64MiB] [--ratio 2.0] [--state-ratio 0.5]
        [--no-state-trigger] [--json FILE]

In process, the real parts: ``Engine`` (the one ``handle`` path), the journal in strict
``sync`` mode (one fdatasync per batch of ``--batch`` jobs, under the bench scratch,
``tay.bench.paths``), and Store-v2 compaction. Each job has the reference shape
(profiles/reference.toml: args ``{"account_key", "payload": "x" * 1024, "version"}``,
queues alpha/beta by parity, one attempt, a no-op success): inserted, started, finished.
The clock is injected: it moves ``3600 s / --jobs-per-hour`` per job, so a million jobs
span ``1e6 / jobs-per-hour`` hours and terminal jobs older than ``--retention`` expire at
each compaction.

Compaction runs where ``tay serve``'s trigger (``CompactionPolicy``: ``--compact-history-bytes``
64 MiB and ``--compact-ratio`` 2.0 by default) says it is due, checked after every batch,
and, as docs/compaction.md describes, when the state budget refused an enqueue (at most once
per ``cooldown_s`` of the injected clock) or when serve's state trigger (``StateTrigger``:
``--compact-state-ratio`` 0.5 of the budget and enough to expire; ``--no-state-trigger``
leaves it out, as serve was before it) says so.
Online compaction (admission paused only for the switch) was not on main when this was
written, so the soak runs the landed *offline* compaction at those points, as ``tay storage
compact`` followed by a restart would: the journal is closed, ``compact_offline`` replays
the store into a fresh engine and publishes the new epoch, and the store is recovered into
a fresh engine (a restart). The first start adopts the new v1 store, as ``tay serve`` does.

Every ``--sample-every`` jobs it prints (and ``--json`` keeps) one row: jobs done, data
directory bytes (every file's size), process RSS (and RSS after ``malloc_trim``, which
separates memory held from free heap the allocator keeps), the engine's state bytes (the
``--max-state-bytes`` charge, default budget 256 MiB), retained jobs, history bytes,
compactions so far, refused enqueues, wall time and process CPU per job.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from tay.bench.paths import bench_scratch  # noqa: E402
from tay.engine import Engine, EngineConfig, Execute, Refuse  # noqa: E402
from tay.engine import commands as c  # noqa: E402
from tay.storage import events as ev  # noqa: E402
from tay.storage.compaction.offline import compact_offline  # noqa: E402
from tay.storage.compaction.offline import durable_form  # noqa: E402
from tay.storage.compaction.trigger import CompactionPolicy, StateTrigger  # noqa: E402
from tay.storage.journal.history_budget import HistoryBudget  # noqa: E402
from tay.storage.journal.writer import init_store  # noqa: E402
from tay.storage.recovery.recover import recover  # noqa: E402
from tay.storage.v2.manifest import parse_retention  # noqa: E402

T0 = 1_800_000_000_000
TASK = "tay.benchmark.v1"
QUEUES = ("alpha", "beta")
ARGS = {"account_key": "benchmark-account", "payload": "x" * 1024, "version": 1}


def parse_size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
    lowered = text.lower()
    for unit, factor in units.items():
        if lowered.endswith(unit):
            return int(float(lowered[: -len(unit)]) * factor)
    return int(text)


def trimmed_rss(process: Any) -> int:
    """RSS after glibc's ``malloc_trim(0)`` hands free heap pages back: what the process
    really holds, as opposed to free memory the allocator keeps (fragmentation)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return process.memory_info().rss


def dir_bytes(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_size
    return total


@dataclass
class Soak:
    root: Path
    config: EngineConfig
    retention: Any
    policy: CompactionPolicy
    ms_per_job: float
    batch: int
    now: int = T0
    engine: Any = None
    journal: Any = None
    last_base_bytes: int = 0
    compactions: list[dict] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    refusals: list[dict] = field(default_factory=list)
    worker_seq: int = 0
    last_compaction_ms: int = 0

    # -- the store -----------------------------------------------------------------------
    def open(self) -> None:
        """Recover the store into a fresh engine (a restart) and connect one worker."""
        # job ids come from the engine's generator: a fresh seed at every restart, as serve
        # has (one fixed seed would hand out the ids of jobs still retained again)
        self.engine = Engine(self.config, random.Random(os.urandom(16)))
        recovered = recover(str(self.root), consumer=self.engine, durability="sync",
                            validated_filesystem=True)
        self.journal = recovered.journal
        if recovered.store_version == 2:
            self.engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
        self.engine.attach_history(HistoryBudget.for_journal(self.journal,
                                                             self.config.history_caps))
        settle = self.engine.finish_recovery(self.now, self.now - T0)
        self.commit(settle.events)
        self.worker_seq += 1
        conn = f"w{self.worker_seq}"
        self.engine.handle(c.Connect(conn, "worker", f"rt{self.worker_seq}", self.batch * 2,
                                     None, "hello"), self.now, self.now - T0)
        self.engine.handle(c.RegisterTasks(conn, (TASK,), "tasks"), self.now, self.now - T0)
        self.conn = conn

    def close(self) -> None:
        self.journal.close()
        self.engine = self.journal = None
        gc.collect()

    def commit(self, events: list) -> None:
        if events:
            self.journal.append_batch(ev.journal_records(events))
            self.journal.sync()  # strict sync: fdatasync before anything is acknowledged

    def compact(self) -> dict:
        started = time.monotonic()
        self.close()
        result = compact_offline(str(self.root), consumer=Engine(self.config),
                                 retention=self.retention, now_ms=lambda: self.now,
                                 durability="sync", validated_filesystem=True)
        gc.collect()
        self.last_base_bytes = result.base_bytes
        self.last_compaction_ms = self.now
        compacted = time.monotonic()
        self.open()
        row = {"at_ms": self.now, "retained": result.retained_jobs,
               "expired": result.expired_jobs, "base_bytes": result.base_bytes,
               "source_bytes": result.source_bytes, "adopted": result.adopted,
               "compaction_s": round(compacted - started, 2),
               "restart_s": round(time.monotonic() - compacted, 2)}
        self.compactions.append(row)
        return row

    def history_bytes(self) -> int:
        return self.journal.history_bytes

    # -- the workload --------------------------------------------------------------------
    def run_batch(self, first_index: int, count: int) -> None:
        engine, events = self.engine, []
        executes: list[Execute] = []
        for index in range(first_index, first_index + count):
            mono = self.now - T0
            out = engine.handle(c.Enqueue("p", None, TASK, ARGS, {"queue": QUEUES[index % 2],
                                                                  "retries": 0}),
                                self.now, mono)
            for effect in out.effects:
                if isinstance(effect, Refuse):
                    error = effect.failure.wire_error()
                    code = error.get("code", "refused")
                    self.refused[code] = self.refused.get(code, 0) + 1
                    if len(self.refusals) < 10:  # the first few in full, for the report
                        self.refusals.append({"job_index": index, "at_ms": self.now, **error})
                elif isinstance(effect, Execute):
                    executes.append(effect)
            events.extend(out.events)
            self.now += int(self.ms_per_job)
        mono = self.now - T0
        for execute in executes:
            out = engine.handle(c.Succeeded(self.conn, None, execute.reservation_id,
                                            execute.execution_id, None), self.now, mono)
            events.extend(out.events)
            for effect in out.effects:  # a freed slot dispatches a waiting job at once
                if isinstance(effect, Execute):
                    executes.append(effect)
        self.commit(events)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--jobs-per-hour", type=int, default=20_000)
    parser.add_argument("--retention", default="1h")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--sample-every", type=int, default=50_000)
    parser.add_argument("--history-bytes", default="64MiB")
    parser.add_argument("--ratio", type=float, default=2.0)
    parser.add_argument("--state-ratio", type=float, default=0.5)
    parser.add_argument("--no-state-trigger", action="store_true",
                        help="compact on history size and budget refusals only")
    parser.add_argument("--json", help="write the samples and compactions here")
    parser.add_argument("--keep", action="store_true", help="keep the store afterwards")
    args = parser.parse_args(argv)

    root = bench_scratch() / f"soak-{uuid.uuid4().hex[:8]}" / "data"
    root.parent.mkdir(parents=True)
    init_store(str(root), durability="sync", validated_filesystem=True)
    soak = Soak(root, EngineConfig(queues={q: 2 for q in QUEUES}),
                parse_retention(args.retention),
                CompactionPolicy(history_bytes=parse_size(args.history_bytes), ratio=args.ratio,
                                 state_ratio=args.state_ratio),
                3_600_000 / args.jobs_per_hour, args.batch)
    process = psutil.Process()
    samples: list[dict] = []
    print(f"soak: {args.jobs:,} jobs, {args.jobs_per_hour:,}/h simulated "
          f"({args.jobs / args.jobs_per_hour:.1f} h), retention {args.retention}, "
          f"batch {args.batch}, trigger {args.history_bytes} x {args.ratio}, state "
          f"{'off' if args.no_state_trigger else args.state_ratio}, store {root}",
          flush=True)
    wall0, cpu0 = time.monotonic(), process.cpu_times()
    soak.open()
    soak.compact()  # the first start adopts the new v1 store (tay serve does the same)
    header = (f"{'jobs':>9} {'sim_h':>6} {'data_MB':>8} {'rss_MB':>7} {'trim_MB':>7} "
              f"{'state_MB':>8} "
              f"{'retained':>8} {'hist_MB':>7} {'compact':>7} {'refused':>7} {'wall_s':>7} "
              f"{'cpu_us/job':>10}")
    print(header, flush=True)
    done = refused_before = 0
    state_trigger = None if args.no_state_trigger else StateTrigger(soak.policy)
    applied = durable_form(soak.retention)
    try:
        while done < args.jobs:
            count = min(args.batch, args.jobs - done)
            soak.run_batch(done, count)
            done += count
            budget_asks = (soak.refused.get("capacity", 0) > refused_before and
                           soak.now - soak.last_compaction_ms >= soak.policy.cooldown_s * 1000)
            refused_before = soak.refused.get("capacity", 0)
            history_due = soak.policy.due(soak.history_bytes(), soak.last_base_bytes)
            budget = soak.engine.budget
            state_due = not history_due and not budget_asks and state_trigger is not None \
                and state_trigger.due(budget.used, budget.limit, soak.now,
                                      lambda at: soak.engine.expirable(applied, at))
            if history_due or budget_asks or state_due:
                row = soak.compact()
                row["reason"] = "history" if history_due else "budget" if budget_asks else "state"
                print(f"  compaction ({row['reason']}) at {done:,}: kept {row['retained']:,}, expired "
                      f"{row['expired']:,}, base {row['base_bytes'] / 1e6:.1f} MB, "
                      f"{row['compaction_s']} s + restart {row['restart_s']} s", flush=True)
            if done // args.sample_every > (done - count) // args.sample_every \
                    or done == args.jobs:
                cpu = process.cpu_times()
                used = cpu.user + cpu.system - cpu0.user - cpu0.system
                rss = process.memory_info().rss
                sample = {
                    "jobs": done, "simulated_h": round((soak.now - T0) / 3_600_000, 2),
                    "data_dir_bytes": dir_bytes(root), "rss_bytes": rss,
                    "rss_trimmed_bytes": trimmed_rss(process),
                    "python_blocks": sys.getallocatedblocks(),
                    "state_bytes": soak.engine.budget.used, "retained_jobs": len(soak.engine.jobs),
                    "history_bytes": soak.history_bytes(), "compactions": len(soak.compactions),
                    "refused": sum(soak.refused.values()), "refused_by_code": dict(soak.refused),
                    "wall_s": round(time.monotonic() - wall0, 1),
                    "cpu_us_per_job": round(used / done * 1e6, 1)}
                samples.append(sample)
                print(f"{done:>9,} {sample['simulated_h']:>6.1f} "
                      f"{sample['data_dir_bytes'] / 1e6:>8.1f} {sample['rss_bytes'] / 1e6:>7.1f} "
                      f"{sample['rss_trimmed_bytes'] / 1e6:>7.1f} "
                      f"{sample['state_bytes'] / 1e6:>8.1f} {sample['retained_jobs']:>8,} "
                      f"{sample['history_bytes'] / 1e6:>7.1f} {sample['compactions']:>7} "
                      f"{sample['refused']:>7} {sample['wall_s']:>7} "
                      f"{sample['cpu_us_per_job']:>10}", flush=True)
    finally:
        if soak.journal is not None:
            soak.close()
        if args.json:
            Path(args.json).write_text(json.dumps({
                "args": vars(args), "samples": samples, "compactions": soak.compactions,
                "refused": soak.refused, "refusals": soak.refusals}, indent=1, default=str))
        if not args.keep:
            shutil.rmtree(root.parent, ignore_errors=True)
    print(f"refused enqueues: {soak.refused or 0}")
    for refusal in soak.refusals:
        print(f"  {refusal}")
    return 0 if not soak.refused else 1


if __name__ == "__main__":
    sys.exit(main())

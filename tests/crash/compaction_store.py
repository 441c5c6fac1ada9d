"""Stores for the compaction crash matrix, written by the real engine, and what they hold.

``write_v1_history`` drives an ``Engine`` with a fixed clock through a v1 journal with a
small rotation target (several source segments): jobs in every state (completed with
results and discarded with failure details, some an hour older than the rest so a 1 h
retention expires them; retryable with failure details, executing, available in three
queues, scheduled for later, cancelled), a paused queue and a cron schedule with an
admitted occurrence. ``continue_in_epoch`` opens a compacted store as ``tay serve`` does and
adds a tail of (8,1)/(30,2) records.

``durable_state`` is what no crash may lose: every persistent job's durable fields (minus
revisions, tokens and order numbers, which adoption translates and offline compaction
renormalizes), the order of the available jobs of each queue, the paused queues and every
schedule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tay.engine import Engine, EngineConfig, Execute
from tay.engine import commands as c
from tay.storage import events as ev
from tay.storage.journal.writer import init_store
from tay.storage.recovery.recover import recover

T0 = 1_700_000_000_000
HOUR = 3_600_000
LATER = T0 + HOUR  # the recent half of the history
CAPTURE = LATER + 10 * 60_000  # a 1 h retention at this capture expires the T0 half only
ROTATION = 2048  # bytes: a handful of records per segment, so several segments (the least allowed in tests is 136)


def engine_config() -> EngineConfig:
    return EngineConfig(max_state_bytes=2**40)


@dataclass
class History:
    """A driven engine and the records it asked the journal to write."""

    engine: Engine
    records: list

    def run(self, command: Any, now: int) -> Any:
        out = self.engine.handle(command, now, now - T0)
        self.records.extend(out.events)
        return out

    def tick(self, now: int) -> Any:
        out = self.engine.tick(now, now - T0)
        self.records.extend(out.events)
        return out

    def executes(self, out: Any) -> list[Execute]:
        return [effect for effect in out.effects if isinstance(effect, Execute)]


def _finish_some(history: History, now: int, tag: str, done: int, failed: int,
                 retried: int) -> None:
    run = history.run
    for n in range(done):
        (execute,) = history.executes(run(c.Enqueue("p", f"{tag}d{n}", "t", {"n": n}, {}), now))
        run(c.Succeeded("w", f"{tag}s{n}", execute.reservation_id, execute.execution_id,
                        {"n": n, "tag": tag}), now)
    for n in range(failed + retried):
        retries = 0 if n < failed else 3
        (execute,) = history.executes(
            run(c.Enqueue("p", f"{tag}f{n}", "t", {"f": n}, {"retries": retries}), now))
        run(c.Failed("w", f"{tag}x{n}", execute.reservation_id, execute.execution_id,
                     {"type": "KeyError", "message": f"{tag} {n}"}), now)


def write_v1_history(root: Path, scale: int = 1, rotation: int = ROTATION) -> None:
    """A v1 store (see the module docstring), ``scale`` times the jobs; the journal is
    closed afterwards."""
    init_store(str(root), durability="write")
    engine = Engine(engine_config(), random.Random(11))
    journal = recover(str(root), consumer=engine, durability="write", rotation_target=rotation,
                      allow_small_rotation_target_for_tests=True).journal
    history = History(engine, [])
    run = history.run

    def flush() -> None:
        if history.records:
            journal.append_batch(ev.journal_records(history.records))
            journal.sync()
            history.records.clear()

    try:
        run(c.Connect("w", "worker", "rt", 1, None, "h"), T0)
        run(c.RegisterTasks("w", ("t",), "r"), T0)
        _finish_some(history, T0, "old", done=3 * scale, failed=scale, retried=0)
        flush()
        out = run(c.Enqueue("p", "cx", "u", {}, {}), T0)
        cancelled = out.effects[0].fields["job_id"]
        run(c.Admin("p", "cancel", "cancel_job", {"job_id": cancelled}), T0)
        run(c.Admin("p", "pause", "pause_queue", {"queue": "slow"}), T0)
        run(c.Schedule("p", "sched", {"declaration_id": "minutely", "task": "u",
                                      "cron": "* * * * *"}), T0)
        flush()
        _finish_some(history, LATER, "new", done=2 * scale, failed=scale, retried=scale)
        flush()
        for n, queue in enumerate(("default", "b", "slow", "default", "b") * scale):
            run(c.Enqueue("p", f"a{n}", "u", {"a": n}, {"queue": queue}), LATER + n)
        run(c.Enqueue("p", "later", "u", {}, {"delay": 86_400}), LATER)
        (execute,) = history.executes(run(c.Enqueue("p", "busy", "t", {"b": 1}, {}), LATER))
        history.tick(LATER + 60_000)  # the schedule admits its due occurrence(s)
        flush()
    finally:
        journal.close()


def open_engine(root: Path, *, io: Any = None, activate: bool = False):
    """Recover ``root`` into a fresh engine as ``tay serve`` does (``recover_engine``: the
    executions left running are settled at the real clock)."""
    from tay.server.recovery import recover_engine

    return recover_engine(str(root), engine_config(), activate=activate, durability="write",
                          io=io)


def stored_state(root: Path, io: Any = None) -> tuple[int, bytes | None, dict[str, Any]]:
    """Read ``root`` without changing it: (store version, selected epoch id or None, the
    durable state as on disk, before any settlement)."""
    engine = Engine(engine_config())
    recovered = recover(str(root), consumer=engine, activate=False, io=io)
    epoch = None
    if recovered.store_version == 2:
        engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
        epoch = recovered.view.epoch_id
    return recovered.store_version, epoch, durable_state(engine)


def continue_in_epoch(root: Path, rotation: int = ROTATION) -> None:
    """Open a Store-v2 store for writing and add a tail: a result, a failure, a resumed
    queue, a cancelled schedule, new available jobs."""
    from tay.storage.journal.history_budget import HistoryBudget

    engine = Engine(engine_config(), random.Random(12))
    recovered = recover(str(root), consumer=engine, durability="write",
                        rotation_target=rotation, allow_small_rotation_target_for_tests=True)
    journal = recovered.journal
    engine.attach_epoch(recovered.reducer, recovered.view.next_sequence)
    engine.attach_history(HistoryBudget.for_journal(journal, engine_config().history_caps))
    now = CAPTURE - 5 * 60_000
    history = History(engine, list(engine.finish_recovery(now, now - T0).events))
    try:
        history.run(c.Connect("w2", "worker", "rt2", 1, None, "h2"), now)
        history.run(c.RegisterTasks("w2", ("v",), "r2"), now)  # only the tail's own jobs
        (execute,) = history.executes(history.run(c.Enqueue("p", "tail1", "v", {"t": 1}, {}),
                                                  now))
        history.run(c.Succeeded("w2", "ts", execute.reservation_id, execute.execution_id,
                                {"tail": True}), now)
        (execute,) = history.executes(history.run(c.Enqueue("p", "tail2", "v", {}, {
            "retries": 0}), now))
        history.run(c.Failed("w2", "tf", execute.reservation_id, execute.execution_id,
                             {"type": "ValueError", "message": "tail"}), now)
        history.run(c.Admin("p", "resume", "resume_queue", {"queue": "slow"}), now)
        history.run(c.Admin("p", "pause2", "pause_queue", {"queue": "b"}), now)
        history.run(c.CancelSchedule("p", "unsched", {"schedule_id": "minutely"}), now)
        for n in range(3):
            history.run(c.Enqueue("p", f"ta{n}", "u", {"ta": n}, {"queue": "slow"}), now + n)
        journal.append_batch(ev.journal_records(history.records))
        journal.sync()
    finally:
        journal.close()


def durable_state(engine: Engine) -> dict[str, Any]:
    """What no crash may lose (see the module docstring)."""
    jobs, queues = {}, {}
    for job in engine.retained_jobs():
        jobs[job.id] = (job.definition_bytes, job.state, job.attempt, job.next_attempt,
                        job.eligible_at, job.inserted_at, job.attempted_at, job.completed_at,
                        job.terminal_at, job.diagnostic, job.result_present, job.result,
                        job.failure)
        if job.ready_order is not None:
            queues.setdefault(job.definition["queue_key"], []).append((job.ready_order, job.id))
    schedules = {
        sid: (s.definition_bytes, s.revision, s.next_at, s.last_at, s.cancelled_at, s.active,
              s.membership_complete)
        for sid, s in engine.schedules.states().items()}
    return {"jobs": jobs,
            "available_order": {q: [i for _, i in sorted(rows)] for q, rows in queues.items()},
            "paused": sorted(engine.paused), "schedules": schedules}


def expired_at(state: dict[str, Any], captured_at: int, retention_ms: int) -> dict[str, Any]:
    """``state`` after a compaction at ``captured_at`` with a bounded retention (§3.4)."""
    jobs = {job_id: fields for job_id, fields in state["jobs"].items()
            if not (fields[8] is not None and captured_at >= retention_ms
                    and fields[8] <= captured_at - retention_ms)}
    return {**state, "jobs": jobs}

"""Terminal base jobs kept as rows at restart (tay.storage.v2.rows, LazyJobEntry).

An engine recovered with the rows answers every question exactly as one recovered eagerly
(every base job built at replay): counts, charges, stamps, the admin pages, the public job,
retention and expiry, what a compaction captures; and reading a job builds the same
JobState. A base the rows cannot vouch for is refused the same way.
"""

from __future__ import annotations

import contextlib
import random
import shutil
from types import SimpleNamespace

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from tay.engine import EngineConfig, Refuse
from tay.engine import commands as c
from tay.engine import state as engine_state
from tay.engine.epoch import EpochEngine
from tay.engine.retained.jobs import JobEntry, LazyJobEntry, peek, public_job
from tay.failures import RecoveryRefused
from tay.server import recovery as server_recovery
from tay.server.recovery import recover_engine
from tay.storage.events import result_recorded
from tay.storage.v2 import Retention, fast
from tay.storage.v2.epoch_records import encode_job_attachment
from tay.storage.v2.reducer import EpochReducer
from tay.storage.v2.rows import BaseLiveRow, JobRow, ResultRow
from tests.engine.conftest import reply
from tests.storage.conftest import scratch_path
from tests.storage.test_transitions import histories
from tests.storage.test_v2_fast_path import LIMITS, jobs, payloads, write_and_compact


@contextlib.contextmanager
def eager_replay():
    """Recover as before the rows: the engine offers no ``epoch_install_row``."""
    method = EpochEngine.epoch_install_row
    del EpochEngine.epoch_install_row
    try:
        yield
    finally:
        EpochEngine.epoch_install_row = method


def recovered(root) -> object:
    """The store recovered as serve does, with a seeded random source and a fixed clock
    (finish_recovery settles executions left running: their time and retry due time)."""
    system_random, clock = engine_state.BufferedSystemRandom, server_recovery.time
    engine_state.BufferedSystemRandom = lambda: random.Random(3)
    server_recovery.time = SimpleNamespace(time_ns=lambda: 9_000 * 10**6,
                                           monotonic_ns=lambda: 10**9)
    try:
        return recover_engine(str(root), EngineConfig(), activate=False).engine
    finally:
        engine_state.BufferedSystemRandom, server_recovery.time = system_random, clock


def all_entries(engine) -> dict:
    """Every job's entry, a job held in columns (tay.engine.retained.finished) as the entry it would
    be taken out as, without taking it out."""
    entries = dict(engine.jobs)
    for job_id in engine.finished.stamps:
        assert job_id not in entries
        entries[job_id] = engine._finished_entry(job_id)
    return entries


def by_id(jobs: list) -> list:
    """``retained_jobs()`` in id order (it promises no order; compaction sorts it)."""
    return sorted(jobs, key=lambda job: job.id)


def bookkeeping(engine) -> dict:
    """Everything replay sets up besides the job states, read without building any job."""
    return {
        "counts": {state: n for state, n in engine.counts.items() if n},
        "queue_counts": engine.queue_counts,
        "budget": (engine.budget.used, engine.budget.admitted),
        "stamp": engine._stamp,
        "next_sequence": engine.next_sequence,
        "order": engine.epoch.next_order,
        "entities": dict(engine.epoch.entities),  # a queue's pause, a day's totals...
        "days": dict(engine.day_history.recorded),
        "entries": {job_id: (entry.volatile, entry.charge, entry.margin, entry.ready_key,
                             entry.queue, entry.task, entry.stamp, entry.attempts,
                             entry.index_keys, entry.queue_row, peek(entry).state,
                             peek(entry).revision, peek(entry).terminal,
                             peek(entry).terminal_at, peek(entry).ready_order,
                             entry.schedule_id)
                    for job_id, entry in all_entries(engine).items()},
    }


def admin(engine, op: str, **body) -> dict:
    return reply(engine.handle(c.Admin("p", "r1", op, body), 10_000, 10_000)).fields


def answers(engine) -> dict:
    """What the operations API, the status and result reads and retention answer."""
    out: dict = {"pages": {}}
    retention = Retention("minutes", 1)
    out["expirable"] = [engine.expirable(retention, at) for at in (0, 5_000, 10**7)]
    out["oldest_terminal"] = engine.oldest_terminal()
    # in id order: stale_expiries answers in the order it is asked, and all_entries lists
    # a job taken out of the columns after the jobs that never were in them
    out["stale"] = sorted(engine.stale_expiries({job_id: peek(e).revision
                                                 for job_id, e in all_entries(engine).items()}))
    out["lookup"] = {job_id: engine.lookup(job_id) for job_id in all_entries(engine)}
    for key in ({}, {"state": "completed"}, {"state": "discarded"}, {"state": "available"},
                {"queue": "q"}, {"task": "w"}, {"limit": 2}, {"queue": "r"},
                {"state": "completed", "queue": "r"}, {"state": "cancelled", "task": "v"},
                {"queue": "q", "task": "v"}):
        out["pages"][str(key)] = admin(engine, "jobs", **key)
    out["overview"] = admin(engine, "overview")
    out["queues"] = admin(engine, "queues")
    out["index_live"] = {key: n for key, n in engine.job_index.live.items() if n}
    return out


def job_answers(engine, job_id: bytes) -> list:
    """The admin job view, then the status and result reads (a reply or a refusal)."""
    out = [admin(engine, "job", job_id=job_id.hex())]
    for read in (c.Status, c.Result):
        (effect,) = engine.handle(read("p", "r2", job_id.hex()), 10_000, 10_000).effects
        out.append(effect.failure.wire_error() if isinstance(effect, Refuse)
                   else effect.fields)
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(histories(), min_size=1, max_size=5))
def test_rows_answer_every_query_as_the_eager_replay(histories_) -> None:
    root = scratch_path("lazy-rows")
    try:
        write_and_compact(root, histories_)
        with eager_replay():
            eager = recovered(root)
        lazy = recovered(root)
        assert all(type(entry) is JobEntry for entry in eager.jobs.values())
        # the terminal base jobs are held as rows or in columns (tay.engine.retained.finished), and
        # waiting ones with no attachment as their live rows
        entries = all_entries(lazy)
        rows = [job_id for job_id, entry in entries.items() if type(entry) is LazyJobEntry]
        kinds = {job_id: type(peek(entries[job_id])) for job_id in rows}
        assert set(kinds.values()) <= {JobRow, BaseLiveRow}
        terminal = [job_id for job_id in rows if kinds[job_id] is JobRow]
        assert all(peek(entries[job_id]).terminal for job_id in terminal)
        assert all(peek(entries[job_id]).state in ("available", "scheduled", "retryable")
                   for job_id in rows if kinds[job_id] is BaseLiveRow)
        assert sorted(job_id for job_id, e in eager.jobs.items() if peek(e).terminal) \
            == sorted(terminal)
        assert bookkeeping(lazy) == bookkeeping(eager)
        assert answers(lazy) == answers(eager)
        for job_id, entry in eager.jobs.items():
            assert job_answers(lazy, job_id) == job_answers(eager, job_id)
            assert public_job(lazy.jobs[job_id]) == public_job(entry)
            assert lazy.jobs[job_id].state == entry.state
            assert type(lazy.jobs[job_id]) is JobEntry  # built once, a plain entry now
        assert by_id(lazy.retained_jobs()) == by_id(eager.retained_jobs())
        assert bookkeeping(lazy) == bookkeeping(eager)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_row_expires_and_is_read_like_any_job() -> None:
    root = scratch_path("lazy-rows")
    try:
        write_and_compact(root, [_completed_history()] * 3)
        engines = []
        with eager_replay():
            engines.append(recovered(root))
        engines.append(recovered(root))
        seen = []
        for engine in engines:
            first, second, third = sorted(all_entries(engine))
            assert engine.expire([first]) == 1
            seen.append((bookkeeping(engine), job_answers(engine, second),
                         admin(engine, "jobs"), engine.expire([third, first]),
                         bookkeeping(engine)))
        assert seen[0] == seen[1]
        assert type(engines[1].jobs[second]) is JobEntry  # read: built
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _completed_history():
    return find(histories(), lambda events: events[-1].name == "result_recorded",
                settings=settings(database=None, max_examples=5000))


def _reduce(records: list[tuple[int, int, bytes]], rows: bool):
    """The base ``records`` through the fast path and a reducer, as replay feeds them."""
    installed: list = []
    reducer = EpochReducer(lambda job_id: None, lambda job, event: installed.append(job),
                           lambda revision, event: None,
                           installed.append if rows else None)
    for rtype, schema, payload in records:
        decoded = fast.decode_batch(payload, [(0, len(payload), rtype, schema)], LIMITS,
                                    rows)[0]
        assert decoded is not None
        if (rtype, schema) == (7, 1):
            reducer.snapshot_state(decoded)
        elif type(decoded) is ResultRow:
            reducer.attachment_row(decoded)
        else:
            reducer.attachment(decoded)
    reducer.end_base()
    return [job.job_state() if type(job) is JobRow else job for job in installed]


def _outcome(records, rows: bool):
    try:
        return _reduce(records, rows)
    except RecoveryRefused as refused:
        return (refused.kind, refused.reason, refused.details)


@settings(max_examples=60, deadline=None)
@given(st.lists(jobs(), min_size=1, max_size=3), st.integers(0, 3))
def test_base_records_reduce_the_same_with_rows_or_refuse_the_same(jobs_, damage) -> None:
    """Any base (jobs in ascending id, their attachments): the same jobs, and when an
    attachment is replaced by one for another revision or job, the same refusal."""
    jobs_ = [job._replace(id=number.to_bytes(16, "big"))
             for number, job in enumerate(jobs_, 1)]
    records = [record for job in jobs_ for record in payloads(job)]
    if damage:
        job = jobs_[0]
        bad = result_recorded(job.id if damage != 2 else b"\xff" * 16, 5,
                              job.revision + (damage == 1), None)
        records.insert(1 + damage % len(records), (31, 2, encode_job_attachment(bad)))
    assert _outcome(records, True) == _outcome(records, False)

"""The columnar replay of a Store-v2 base (``tay._native.base_jobs``, ``csrc/base_jobs.c``).

The C walk equals its pure twin on any base (valid, out of order, damaged, cut anywhere);
replaying any prefix of a base through it leaves exactly what the record-by-record replay
leaves (the same rows in the same order, the same jobs when built) or is refused exactly the
same way; and an engine recovered
through it answers exactly as one recovered record by record.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
import unittest.mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tay.storage.events.transitions import JobState
from tay import _native
from tay._native import _pure_base, _pure_events, pure
from tay.failures import RecoveryRefused
from tay.storage.events import result_recorded
from tay.storage.events.operations import failure_recorded, job_deleted
from tay.storage.formats.record_table import RecordTable
from tay.storage.formats.value import DecodeLimits
from tay.storage.recovery import store_v2
from tay.storage.recovery.physical import SegmentView
from tay.storage.v2.epoch_records import (
    decode_epoch_event, encode_epoch_event, encode_job_attachment,
)
from tay.storage.v2.reducer import EpochReducer
from tay.storage.v2.rows import BaseLiveRow, JobRow
from tests.build_guard import c_twin
from tay.engine import commands as c
from tay.engine.config import EngineConfig
from tay.engine.core import Engine
from tay.engine.epoch import EpochEngine, captured_state, captured_states
from tay.engine.retained.jobs import LazyJobEntry, peek
from tests.engine.test_lazy_rows import answers, bookkeeping, by_id, job_answers, recovered
from tests.engine.test_tail_columns import (
    DELAYED_ACTIONS, WALK_ACTIONS, journal_frames, plans_equal_builds, same_engines,
    tail_driver,
)
from tests.engine.test_tail_columns import outcome as recovered_or_refused
from tests.engine.test_tail_columns import record_by_record as tail_record_by_record
from tests.engine.conftest import T0
from tests.storage.conftest import scratch_path
from tests.storage.test_store_v2_rules import rewrite_tail
from tests.storage.test_transitions import histories
from tests.storage.test_v2_fast_path import LIMITS, jobs, payloads, write_and_compact

c_native = c_twin()
HEADER = 44  # a segment header comes before the first record


@st.composite
def bases(draw):
    """Base records of a few jobs: ids mostly ascending (sometimes repeated or falling),
    their attachments, now and then an extra result or failure attachment (often for a
    waiting job, or before a finished job's own), or a result for another revision or job
    instead of their own."""
    finished = jobs().filter(lambda job: job.terminal)  # what the columns take, mostly
    waiting = jobs().filter(lambda job: job.state in ("available", "scheduled", "retryable"))
    jobs_ = draw(st.lists(st.one_of(finished, finished, waiting, jobs()), min_size=1,
                          max_size=6))
    number = 0
    records = []
    for job in jobs_:
        number += draw(st.sampled_from([1, 1, 1, 2, 0, -1]))
        job = job._replace(id=max(number, 1).to_bytes(16, "big"))
        own = payloads(job)
        extra = draw(st.integers(0, 8))
        if extra in (4, 5, 6):  # the job's own attachments replaced by one result
            own = own[:1] + [(31, 2, encode_job_attachment(result_recorded(
                job.id if extra != 5 else b"\xff" * 16, 5, job.revision + (extra == 4),
                None)))]
        records += own
        if extra == 1:
            records.append((31, 2, encode_job_attachment(
                result_recorded(job.id, 5, job.revision, draw(st.none() | st.integers(0, 9))))))
        elif extra == 2:
            records.append((31, 2, encode_job_attachment(
                result_recorded(job.id, 5, job.revision + 1, None))))
        elif extra == 3 or (extra > 6 and job.state in ("available", "scheduled",
                                                        "retryable")) \
                or (extra == 8 and job.terminal and job.failure is None):
            records.append((31, 2, encode_job_attachment(  # a waiting job's: often
                failure_recorded(job.id, 5, job.revision, {"message": "m"}))))
        elif extra == 7 and job.terminal:  # details before its own attachments (a result's)
            records[len(records) - len(own) + 1:len(records) - len(own) + 1] = [
                (31, 2, encode_job_attachment(failure_recorded(
                    job.id, 5, job.revision, {"message": "m", "type": "E"})))]
    return records


def frames(records: list[tuple[int, int, bytes]]) -> tuple[bytes, RecordTable]:
    """The records as Record v1 frames after a segment-sized header, and their columns."""
    body = pure.encode_records([(rtype, schema, sequence, payload) for sequence,
                                (rtype, schema, payload) in enumerate(records, 1)])
    data = bytes(HEADER) + body
    table = RecordTable(1)
    offsets, types, schemas, lengths, _, stop = pure.scan_record_columns(
        data, HEADER, len(data), 1 << 24, 1)
    assert stop == "end"
    table.extend(offsets, types, schemas, lengths)
    return data, table


def walk(twin, data, table: RecordTable, start: int, stop: int, last_id,
         take_live: bool = False, open_end: bool = False):
    return twin.base_jobs(data, table.offsets, table.lengths, table.types, table.schemas,
                          start, stop, last_id, take_live=take_live, open_end=open_end)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bases(), st.data())
def test_c_equals_python_on_any_base(records, data) -> None:
    raw, table = frames(records)
    count = len(table)
    start = data.draw(st.just(0) | st.integers(0, count))
    stop = data.draw(st.just(count) | st.integers(start, count))
    last_id = data.draw(st.none() | st.binary(min_size=16, max_size=16)
                        | st.integers(0, 3).map(lambda n: n.to_bytes(16, "big")))
    live, open_end = data.draw(st.booleans()), data.draw(st.booleans())
    taken = walk(c_native, raw, table, start, stop, last_id, live, open_end)
    assert taken == walk(pure, raw, table, start, stop, last_id, live, open_end)
    if open_end and stop > start:  # no job taken whose records end the range
        assert taken[0] < stop
    live_rows = taken[2]
    event(f"jobs taken: {min(len(taken[1]) // _pure_base.BASE_JOB, 3)}, "
          f"live: {min(len(live_rows) // _pure_base.BASE_LIVE, 2)}, with details: "
          f"{min(sum(map(bool, live_rows[_pure_base.LIVE_FAILURE_LENGTH::_pure_base.BASE_LIVE])), 1)}, "
          f"finished with details: "
          f"{min(sum(map(bool, taken[1][_pure_base.FAILURE_LENGTH::_pure_base.BASE_JOB])), 1)}")
    if not live:
        assert not taken[2]
    # one flipped byte anywhere, or a buffer cut short: still the same walk
    flip = data.draw(st.integers(0, len(raw) - 1))
    damaged = bytearray(raw)
    damaged[flip] ^= data.draw(st.integers(1, 255))
    cut = raw[:data.draw(st.integers(0, len(raw)))]
    for buffer in (bytes(damaged), cut):
        assert walk(c_native, buffer, table, start, stop, last_id, live, open_end) == \
            walk(pure, buffer, table, start, stop, last_id, live, open_end)


def gathered(twin, buf, rows, origin: int, max_distinct: int):
    """``base_ids`` and both key columns, or the ValueError's class for bytes outside."""
    try:
        return (twin.base_ids(buf, rows, origin),
                [twin.base_keys(buf, rows, origin, slot, max_distinct)
                 for slot in (_pure_base.QUEUE, _pure_base.WORKER)])
    except ValueError:
        return ValueError


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bases(), st.data())
def test_ids_and_keys_gather_the_same_in_c_and_python(records, data) -> None:
    """What an engine keeps of a run per job (ids, keys as indexes into the distinct keys)
    is what slicing each job's bytes gives, in both twins, over the segment or a part of it
    starting at ``origin``."""
    raw, table = frames(records)
    _, rows, _ = walk(pure, raw, table, 0, len(table), None)
    origin = data.draw(st.integers(0, min(rows[_pure_base.SNAPSHOT::_pure_base.BASE_JOB],
                                          default=0)))
    buf = raw[origin:]
    max_distinct = data.draw(st.integers(0, 4))
    got = gathered(c_native, buf, rows, origin, max_distinct)
    assert got == gathered(pure, buf, rows, origin, max_distinct)
    ids, keys = got
    step = _pure_base.BASE_JOB
    assert ids == [raw[start:start + 16] for start in rows[_pure_base.SNAPSHOT::step]]
    for slot, found in zip((_pure_base.QUEUE, _pure_base.WORKER), keys):
        texts = [raw[start:start + length]
                 for start, length in zip(rows[slot::step], rows[slot + 1::step])]
        if found is None:
            assert len(set(texts)) > max_distinct
        else:
            index, distinct = found
            assert [distinct[d] for d in index] == texts
            assert distinct == list(dict.fromkeys(texts))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.lists(st.integers(0, 80), min_size=_pure_base.BASE_JOB,
                                        max_size=4 * _pure_base.BASE_JOB),
       st.integers(0, 8), st.integers(0, 3))
def test_ids_and_keys_refuse_bytes_outside_the_buffer_alike(buf, values, origin,
                                                           max_distinct) -> None:
    """Rows that point anywhere (outside the buffer, before ``origin``): both twins gather
    the same or both raise ValueError."""
    from array import array

    rows = array("Q", values[:len(values) // _pure_base.BASE_JOB * _pure_base.BASE_JOB])
    assert gathered(c_native, buf, rows, origin, max_distinct) == \
        gathered(pure, buf, rows, origin, max_distinct)


def test_the_row_layout_is_the_documented_one() -> None:
    assert c_native.lib.TAY_BASE_JOB == _pure_base.BASE_JOB == 18
    assert (c_native.lib.TAY_BJ_RECORD, c_native.lib.TAY_BJ_RESULT_BYTES) == \
        (_pure_base.RECORD, _pure_base.RESULT_BYTES)
    assert c_native.lib.TAY_BASE_LIVE == _pure_base.BASE_LIVE == 18
    # base_jobs.c's definition_slots writes both layouts' six key and size slots in order
    assert [getattr(c_native.lib, f"TAY_B{kind}_{name}")
            - getattr(c_native.lib, f"TAY_B{kind}_QUEUE")
            for kind in "JL" for name in ("QUEUE", "QUEUE_LENGTH", "WORKER", "WORKER_LENGTH",
                                          "DEFINITION_LENGTH", "ARGS_NODES")] == \
        [0, 1, 2, 3, 4, 5] * 2
    lib = c_native.lib
    assert (lib.TAY_BL_BEFORE, lib.TAY_BL_RECORD, lib.TAY_BL_STATE, lib.TAY_BL_ORDER,
            lib.TAY_BL_HAS_ORDER, lib.TAY_BL_ELIGIBLE_AT, lib.TAY_BL_ARGS_NODES,
            lib.TAY_BL_FAILURE, lib.TAY_BL_FAILURE_BYTES) == \
        (_pure_base.BEFORE, _pure_base.LIVE_RECORD, _pure_base.LIVE_STATE, _pure_base.ORDER,
         _pure_base.HAS_ORDER, _pure_base.ELIGIBLE_AT, _pure_base.LIVE_ARGS_NODES,
         _pure_base.LIVE_FAILURE, _pure_base.LIVE_FAILURE_BYTES)
    assert (lib.TAY_BASE_JOB, lib.TAY_BJ_RESULT_BYTES, lib.TAY_BJ_FAILURE,
            lib.TAY_BJ_FAILURE_LENGTH, lib.TAY_BJ_FAILURE_BYTES) == \
        (_pure_base.BASE_JOB, _pure_base.RESULT_BYTES, _pure_base.FAILURE,
         _pure_base.FAILURE_LENGTH, _pure_base.FAILURE_BYTES)


# ---- any prefix of a base replays the same through the columns ----------------------------

@contextlib.contextmanager
def record_by_record():
    """Replay as before the columns: no run is ever taken in one call."""
    original = store_v2._base_run
    store_v2._base_run = lambda mapping, records, position, *rest: position
    try:
        yield
    finally:
        store_v2._base_run = original


def replay_base(raw: bytes, table: RecordTable, bulk: bool, live: bool = False):
    """The base replayed as recovery does (a mapped file, the rows consumer); what was
    installed, in order, each row with its fields and the job it builds. ``live``: the
    consumer holds a run's live jobs as rows too (each is installed as the job it builds,
    after checking the fields the engine reads from the row against it)."""
    installed: list = []

    def row(job: JobRow) -> None:
        installed.append(("row", job.id, job.state, job.revision, job.terminal_at, job.queue,
                          job.task, job.definition_length, job.args_nodes, job.result_bytes,
                          job.snapshot, job.result, job))

    def rows(jobs) -> None:
        for job in jobs.job_rows():
            row(job)

    def live_rows(jobs, held, befores) -> None:
        finished = list(jobs.job_rows())
        assert list(befores) == sorted(befores) and (not befores or befores[-1] <= len(finished))
        done = 0
        for before, live_row in zip(befores, held):
            for job in finished[done:before]:
                row(job)
            done = before
            job = live_row.job_state()
            assert (live_row.id, live_row.state, live_row.revision, live_row.ready_order,
                    live_row.eligible_at, live_row.queue, live_row.task,
                    live_row.definition_length) == \
                (job.id, job.state, job.revision, job.ready_order, job.eligible_at,
                 job.definition["queue_key"], job.definition["worker_key"],
                 len(job.definition_bytes))
            installed.append(("job", job))
        for job in finished[done:]:
            row(job)

    reducer = EpochReducer(lambda job_id: None,
                           lambda job, event: installed.append(("job", job)),
                           lambda revision, event: None, row, rows if bulk else None,
                           install_base_live=live_rows if live else None)
    fd, path = tempfile.mkstemp(prefix="base-columns-")
    try:
        os.write(fd, raw)
        mapping = mmap.mmap(fd, len(raw), prot=mmap.PROT_READ)
        view = SegmentView(1, path, os.fstat(fd).st_ino, len(raw), _Scan(table), mapping)
        try:
            next_sequence = store_v2._replay_segment(view, True, 1, None,
                                                     store_v2._Dispatch(reducer, LIMITS),
                                                     LIMITS, None)
            reducer.end_base()
        except RecoveryRefused as refused:
            return installed, (refused.kind, refused.reason, refused.details)
        finally:
            mapping.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return installed, next_sequence


class _Scan:
    def __init__(self, records: RecordTable) -> None:
        self.records = records


def prefix(table: RecordTable, count: int) -> RecordTable:
    out = RecordTable(1)
    out.extend(table.offsets[:count], table.types[:count], table.schemas[:count],
               table.lengths[:count])
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bases(), st.data())
def test_any_prefix_replays_the_same_in_columns(records, data) -> None:
    raw, table = frames(records)
    cut = prefix(table, data.draw(st.just(len(table)) | st.integers(0, len(table))))
    # record-by-record batches this long between the columnar runs (256 in recovery)
    batch = data.draw(st.sampled_from([1, 2, 3, 256]))
    with contextlib.ExitStack() as stack:
        stack.callback(setattr, store_v2, "_BATCH", store_v2._BATCH)
        store_v2._BATCH = batch
        check_prefix(raw, cut)


def check_prefix(raw: bytes, cut: RecordTable) -> None:
    with record_by_record():
        expected = outcome(replay_base(raw, cut, bulk=False))
    assert outcome(replay_base(raw, cut, bulk=False)) == expected  # rows one by one
    assert outcome(replay_base(raw, cut, bulk=True)) == expected  # a run at once
    # a run with its live jobs as rows
    assert outcome(replay_base(raw, cut, bulk=True, live=True)) == expected


def test_a_run_cut_by_its_cap_leaves_its_last_jobs_attachment_to_the_exact_way() -> None:
    """A run is at most ``_RUN`` records. A job without attachments (a cancelled one, or a
    waiting one the run holds as a row) puts the later snapshots and results out of step
    with the cap, so a run can end at a completed job's snapshot with its result just past
    it: that job must go the exact way with its result, not be taken alone (the result
    would then come without its snapshot and recovery refuse the base: found while taking
    live jobs into the runs)."""
    from tay.storage import events as ev
    from tay.storage.events.definition import build_definition
    from tay.storage.events.transitions import apply, expected_finish

    def final(*steps):
        job, history = None, []
        for step in steps:
            history.append(step(job))
            job = apply(job, len(history), history[-1])
        return job

    def numbered(job, number: int):
        return job._replace(id=number.to_bytes(16, "big"))

    definition = build_definition(worker_key="w", queue_key="q", max_attempts=1)
    job_id = (1).to_bytes(16, "big")
    inserted = lambda job: ev.job_inserted(job_id, 0, definition)  # noqa: E731
    disposition, next_attempt = expected_finish(0, 1, 1)
    completed = final(
        inserted,
        lambda job: ev.job_started(job_id, 0, job.revision, job.next_attempt, job.cycle),
        lambda job: ev.job_finished(job_id, 0, job.revision, execution_token=job.execution,
                                    outcome=0, diagnostic_code=None, disposition=disposition,
                                    next_attempt=next_attempt, next_due_at=None),
        lambda job: ev.result_recorded(job_id, 0, job.revision, None))
    cancelled = final(inserted, lambda job: ev.job_cancelled(job_id, 0, job.revision, None))
    waiting = final(inserted)
    assert waiting.state == "available" and len(payloads(completed)) == 2
    for first in (cancelled, waiting):
        records = payloads(numbered(first, 1))
        for number in range(2, store_v2._RUN // 2 + 40):
            records += payloads(numbered(completed, number))
        raw, table = frames(records)
        assert len(table) > store_v2._RUN and table.types[store_v2._RUN] == 31
        check_prefix(raw, table)




def outcome(replayed):
    """What a replay leaves: everything installed, in order, or the refusal alone (a refused
    recovery discards its consumer; the columns may have installed a finished job the
    record-by-record way still held pending when the next record was refused)."""
    installed, end = replayed
    if isinstance(end, tuple):
        return end
    return [with_details(entry[-1]) if entry[0] == "row" and entry[-1].failure is not None
            else entry[:-1] + (built(entry[-1]),) if entry[0] == "row" else entry
            for entry in installed], end


def with_details(row: JobRow):
    """A finished job the columns took with its failure's details, which the record-by-record
    way builds: the job it builds, its row's fields and charges checked against it."""
    from tay.engine.state import failure_bytes
    from tay.engine.validation.values import measure

    job = row.job_state()
    assert (row.id, row.state, row.revision, row.terminal_at, row.queue, row.task,
            row.definition_length, row.result_present, row.failure_bytes) == \
        (job.id, job.state, job.revision, job.terminal_at, job.definition["queue_key"],
         job.definition["worker_key"], len(job.definition_bytes), job.result_present,
         failure_bytes(job.failure))
    assert row.result_bytes == (0 if not job.result_present else 1 if job.result is None
                                else measure(job.result, "result").encoded_bytes)
    return ("job", job)


def built(row: JobRow):
    """The job a row builds when first read (after the replay, as the engine does)."""
    try:
        return row.job_state()
    except RecoveryRefused as refused:
        return ("refused", refused.kind, refused.reason)


# ---- an engine recovered through the columns ----------------------------------------------

@st.composite
def keyed_histories(draw):
    """A job's random valid history, its queue and task drawn from two each (so a filtered
    admin page walks the queue or task list and checks the state on each job)."""
    from tay.storage import events as ev

    history = draw(histories())
    inserted = history[0]
    definition = {**inserted.payload["definition"], "queue_key": draw(st.sampled_from("qr")),
                  "worker_key": draw(st.sampled_from("wv"))}
    return [ev.make_event(inserted.pair, {**inserted.payload, "definition": definition}),
            *history[1:]]


def waiting(engine) -> tuple:
    """What a base's live jobs leave besides their entries: the ready heaps (queue, task,
    entries, and the rotation's order), the ready counter and the timer heap."""
    ready = engine._ready
    heaps = {queue: {task: sorted(heap) for task, heap in tasks.items()}
             for queue, tasks in ready._queues.items()}
    return (heaps, list(ready.rotation), engine._ready_counter, sorted(engine._timers._heap),
            engine._timers._counter)


def assert_alike(after, before) -> None:
    """``after`` (recovered in columns) answers as ``before`` (record by record) for every
    job, and reading them all leaves the two engines' bookkeeping equal."""
    assert bookkeeping(after) == bookkeeping(before)
    assert waiting(after) == waiting(before)
    assert answers(after) == answers(before)
    for job_id in before.jobs:
        assert job_answers(after, job_id) == job_answers(before, job_id)
        assert after.jobs[job_id].state == before.jobs[job_id].state
    assert bookkeeping(after) == bookkeeping(before)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(keyed_histories(), min_size=1, max_size=6))
def test_an_engine_recovered_in_columns_answers_as_one_recovered_record_by_record(
        histories_) -> None:
    root = scratch_path("base-columns")
    try:
        write_and_compact(root, histories_)
        with record_by_record():
            before = recovered(root)
        after = recovered(root)
        event(f"finished jobs held with failure details: {min(held_with_details(after), 2)}")
        assert_alike(after, before)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def held_with_details(engine) -> int:
    """How many finished jobs the engine holds in columns with their failure's details."""
    return sum(1 for jobs, k in engine.finished.held()
               if jobs.columns[k * _pure_base.BASE_JOB + _pure_base.FAILURE_LENGTH])


# ---- and every later command: jobs held in columns are taken out as they are touched ------

def steps():
    """A later command on job ``n`` (1-based, as ``write_and_compact`` numbers them; one
    past the last is a job that does not exist), or an engine-side question."""
    job = st.integers(1, 7)
    return st.one_of(
        st.tuples(st.sampled_from(["status", "result", "cancel", "job", "retry_job",
                                   "cancel_job", "lookup", "view"]), job),
        st.tuples(st.just("enqueue"), st.tuples(job, st.sampled_from("qr"),
                                                st.sampled_from("wv"), st.integers(0, 3))),
        st.tuples(st.just("jobs"), st.sampled_from([
            {}, {"state": "completed"}, {"state": "available"}, {"queue": "q"}, {"task": "w"},
            {"limit": 1}, {"state": "completed", "queue": "r"},
            {"state": "discarded", "task": "v"}, {"queue": "r", "task": "w"}])),
        st.tuples(st.sampled_from(["overview", "queues", "purge", "retained", "capture",
                                   "worker", "succeed", "fail", "tick"]), st.just(0)),
        st.tuples(st.just("expire"), st.lists(job, max_size=3)),
        st.tuples(st.just("expirable"), st.sampled_from([0, 5_000, 10**7])),
        st.tuples(st.just("stale"), st.lists(st.tuples(job, st.integers(0, 9)), max_size=3)),
    )


def take(engine, step, now: int):
    """What ``engine`` answers to ``step``: the records it would write (pair and bytes), its
    effects (a refusal as its wire error), and the engine-side answer."""
    from tay.engine import Refuse
    from tay.engine import commands as c
    from tay.storage.v2 import Retention
    from tests.engine.test_lazy_rows import by_id

    kind, arg = step
    hex_id = arg.to_bytes(16, "big").hex() if type(arg) is int else None
    if kind == "lookup":  # the schedules' lookup: a state name, "executing" while running
        return engine.lookup(arg.to_bytes(16, "big"))
    if kind == "view":  # the server's read helpers
        return engine.job_view(arg.to_bytes(16, "big")), engine.job(arg.to_bytes(16, "big"))
    if kind in ("status", "result", "cancel"):
        command = {"status": c.Status, "result": c.Result, "cancel": c.Cancel}[kind](
            "p", "r", hex_id)
    elif kind in ("job", "retry_job", "cancel_job"):
        command = c.Admin("p", "r", kind, {"job_id": hex_id})
    elif kind == "enqueue":  # an existing id: the same job (often), or a conflict
        number, queue, task, retries = arg
        command = c.Enqueue("p", "r", task, {}, {"id": number.to_bytes(16, "big").hex(),
                                                 "queue": queue, "retries": retries})
    elif kind == "purge":
        command = c.Admin("p", "r", "purge_queue", {"queue": "r", "limit": 2})
    elif kind == "jobs":
        command = c.Admin("p", "r", "jobs", arg)
    elif kind in ("overview", "queues"):
        command = c.Admin("p", "r", kind, {})
    elif kind == "worker":
        engine.handle(c.Connect("x", "worker", "rt", 2, None, "r0"), now, now)
        command = c.RegisterTasks("x", ("w",), "r1")
    elif kind in ("succeed", "fail"):
        reservations = sorted(engine.executors.reservations.values(),
                              key=lambda r: r.reservation_id)
        if not reservations:
            return None
        first = reservations[0]
        command = c.Succeeded(first.conn, "r", first.reservation_id, first.execution_id, 7) \
            if kind == "succeed" else c.Failed(first.conn, "r", first.reservation_id,
                                               first.execution_id, {"message": "m"})
    elif kind == "tick":
        out = engine.tick(now, now)
        return [(s, e.pair, e.raw) for s, e in out.events], out.effects
    elif kind == "expire":
        return engine.expire([n.to_bytes(16, "big") for n in arg])
    elif kind == "expirable":
        return engine.expirable(Retention("minutes", 1), arg), engine.oldest_terminal()
    elif kind == "stale":
        return engine.stale_expiries({n.to_bytes(16, "big"): r for n, r in arg})
    elif kind == "retained":
        return by_id(engine.retained_jobs())
    else:  # capture
        captured, order = engine.online_capture()  # held jobs built by the compaction
        states = [captured.state_of(job) for job in captured.jobs]
        assert captured.states_of(captured.jobs) == states  # together as one by one
        plans_equal_builds(captured, states)  # a held job's plan reads what its state holds
        return by_id(states), order
    out = engine.handle(command, now, now)
    return ([(s, e.pair, e.raw) for s, e in out.events],
            [("refused", e.failure.wire_error()) if isinstance(e, Refuse) else e
             for e in out.effects])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(keyed_histories(), min_size=1, max_size=6), st.lists(steps(), max_size=14),
       st.sampled_from([1, 256]))
def test_an_engine_in_columns_takes_every_later_command_as_one_recovered_record_by_record(
        histories_, later, batch) -> None:
    root = scratch_path("base-columns")
    try:
        write_and_compact(root, histories_)
        with record_by_record():
            before = recovered(root)
        with contextlib.ExitStack() as stack:  # batch 1: a run after any other record
            stack.callback(setattr, store_v2, "_BATCH", store_v2._BATCH)
            store_v2._BATCH = batch
            after = recovered(root)
        assert not before.finished
        assert waiting(after) == waiting(before)
        held = len(after.finished)
        assert held <= sum(1 for e in before.jobs.values() if peek(e).terminal)
        event(f"jobs held in columns: {min(held, 3)}")
        live = sum(1 for entry in after.jobs.values() if type(peek(entry)) is BaseLiveRow)
        event(f"live jobs held as rows: {min(live, 3)}")
        for number, step in enumerate(later):
            now = 10_000 + 1_000 * number
            assert take(after, step, now) == take(before, step, now)
            assert bookkeeping(after) == bookkeeping(before)
        assert answers(after) == answers(before)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_job_retried_out_of_the_columns_answers_like_the_rows() -> None:
    """Found by the test above (5af89c2): the retried job joins the column engine's rows
    last, so the two engines list their jobs in different orders; the answers must not
    differ."""
    from tay.storage import events as ev

    job_id = (1).to_bytes(16, "big")
    definition = {"args": {}, "definition_version": 1, "max_attempts": 1, "queue_key": "q",
                  "retry_policy": {"base_ms": 1000, "cap_ms": 60000, "jitter_divisor": 4,
                                   "version": 1},
                  "scheduled_at": None, "timeout_ms": 30000, "worker_key": "w"}
    inserted = ev.make_event((1, 1), {"at": 0, "definition": definition, "eligible_at": 0,
                                      "expected_revision": 0, "job_id": job_id})
    cancelled = ev.make_event((5, 1), {"at": 0, "execution_token": None,
                                       "expected_revision": 1, "job_id": job_id})
    inner = test_an_engine_in_columns_takes_every_later_command_as_one_recovered_record_by_record
    with unittest.mock.patch(f"{__name__}.event"):  # hypothesis' event() needs a test run
        inner.hypothesis.inner_test([[inserted, cancelled], [inserted]], [("retry_job", 1)], 1)


def test_jobs_expired_before_the_job_index_is_built_are_not_in_it() -> None:
    """Replay defers the admin job index to its first use, and an expiry no longer builds
    it (a compaction's switch drops its expired jobs while writes wait): built afterwards,
    it must answer as an index built first that forgot them, except that the latter still
    holds their stale entries, so a full page of it may end with a cursor to an empty one."""
    from tay.storage import events as ev

    def job(n: int, *, cancelled: bool) -> list:
        job_id = n.to_bytes(16, "big")
        definition = {"args": {}, "definition_version": 1, "max_attempts": 1,
                      "queue_key": "qr"[n % 2], "retry_policy": {
                          "base_ms": 1000, "cap_ms": 60000, "jitter_divisor": 4, "version": 1},
                      "scheduled_at": None, "timeout_ms": 30000, "worker_key": "wv"[n % 3 % 2]}
        out = [ev.make_event((1, 1), {"at": 0, "definition": definition, "eligible_at": 0,
                                      "expected_revision": 0, "job_id": job_id})]
        if cancelled:
            out.append(ev.make_event((5, 1), {"at": 0, "execution_token": None,
                                              "expected_revision": 1, "job_id": job_id}))
        return out

    root = scratch_path("base-columns")
    try:
        write_and_compact(root, [job(n, cancelled=n % 3 != 0) for n in range(1, 10)])
        engines = [recovered(root), recovered(root)]
        assert all(engine._job_index is None for engine in engines)
        engines[1].job_index
        expired = [n.to_bytes(16, "big") for n in (1, 2, 4, 5, 8, 8)]  # 8 named twice
        assert [engine.expire(expired) for engine in engines] == [5, 5]
        assert engines[0]._job_index is None
        first, second = (answers(engine) for engine in engines)
        for page in (*first["pages"].values(), *second["pages"].values()):
            page.pop("next_cursor")
        assert first == second and first["index_live"][("all", "")] == 4
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_store(root, frames: list, compact: bool = False, **options) -> None:
    """A store at ``root`` whose tail is ``frames`` (an engine's records:
    ``tests.engine.test_tail_columns.tail_frames``); with ``compact`` compacted offline into
    its base, every job kept (``options``: more of ``compact_offline``'s; by default a
    plain job table is the consumer, which carries no other state: a tail holding a day's
    totals needs an engine)."""
    from tests.engine.test_tail_columns import empty_store
    from tests.storage.test_store_v2_rules import rewrite_tail
    from tay.storage.compaction.offline import compact_offline
    from tay.storage.recovery.recover import TableConsumer
    from tay.storage.v2 import Retention

    empty_store(root)
    rewrite_tail(root, frames)
    if compact:
        options.setdefault("consumer", TableConsumer())
        compact_offline(str(root), durability="write", retention=Retention("infinity"),
                        now_ms=lambda: 1_000, **options)


@contextlib.contextmanager
def recovered_both_ways(shape: str, jobs: int, every: int, **options):
    """``jobs`` jobs of a ``benchmarks.tail_restart`` shape (one in ``every`` odd) compacted
    into a base (``options``: more of ``compact_offline``'s) in a scratch store, recovered
    record by record and through the columns: ``(root, before, after)``; the store goes
    afterwards."""
    from benchmarks.tail_restart import shape_actions
    from tests.engine.test_tail_columns import tail_frames

    root = scratch_path("base-columns")
    try:
        write_store(root, tail_frames(0, shape_actions(shape, jobs, every)), compact=True,
                    **options)
        with record_by_record():
            before = recovered(root)
        yield root, before, recovered(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("target", [9_001, 9_075, 9_223])
@pytest.mark.parametrize("shape", ["success", "waiting", "backlog"])
def test_a_job_whose_attachment_is_in_the_next_base_segment_recovers(shape, target) -> None:
    """A base rolls to its next segment at the rotation target wherever that falls, so a
    job's result may be the next segment's first record: a run that ends at a segment's
    end must leave its last job to the exact way, which takes the attachment from the next
    segment (taken alone, the result came without its snapshot and recovery refused the
    base: found while taking live jobs into the runs; with these targets, at least one
    of the three fails before the fix for each shape)."""
    with recovered_both_ways(shape, 200, 3, rotation_target=target,
                             allow_small_rotation_target_for_tests=True) as (root, before, after):
        assert len(list(root.glob("epochs/*/segments/*.tay"))) >= 5  # the base's, rolled
        assert len(before.jobs) == 200
        assert len(after.finished) >= 100
        assert_alike(after, before)


# ---- a base whose live jobs stand one by one among its finished ones ---------------------

@pytest.mark.parametrize("shape", ["failed", "waiting"])
@pytest.mark.parametrize("every", [7, 100])
def test_lone_live_jobs_in_a_base_leave_the_finished_jobs_in_columns(every, shape) -> None:
    """A base orders its jobs by id, so a live job (retryable after a failed first attempt:
    its snapshot and its failure's details; or scheduled: its snapshot alone) stands alone
    among finished ones (a snapshot and its result each). Where a run of finished jobs
    stops at one, only the records up to the next job's snapshot go the record-by-record
    way before the next run: with one live job in 100, nearly every finished job is held in
    columns (the whole next batch of 256 records used to go the slow way: about 40 % were
    held).
    Dense live jobs (one in 7) recover the same; either way as record by record."""
    jobs = 1000
    with recovered_both_ways(shape, jobs, every) as (_, before, after):
        live = jobs // every
        assert len(before.finished) == 0 and len(before.jobs) == jobs
        if every == 100:  # (all but where two live jobs stand close: 985 of 990)
            assert len(after.finished) >= 0.95 * (jobs - live)
        assert_alike(after, before)


# ---- finished jobs with their failure's details -------------------------------------------

@pytest.mark.parametrize("shape", ["discarded", "retried"])
@pytest.mark.parametrize("every", [1, 7])
def test_finished_jobs_with_failure_details_are_held_in_columns(every, shape) -> None:
    """A job discarded by a worker failure keeps its failure's details, and so does one whose
    retry then succeeded (beside its result): the base attaches them after the snapshot
    (the result first). The columns take both, charging the details to the job's margin as
    the record-by-record way does (they used to stop the run: ~85 µs a job the exact way).
    Every job then answers, and an operator's retry of a held discarded one writes the
    same records, as one recovered record by record."""
    from tay.engine import commands as c

    jobs = 300
    with recovered_both_ways(shape, jobs, every) as (_, before, after):
        odd = jobs // every
        assert len(before.finished) == 0 and len(before.jobs) == jobs
        assert len(after.finished) >= 0.95 * jobs  # (a run's cap leaves a few the exact way)
        assert held_with_details(after) >= 0.9 * odd
        assert_alike(after, before)
        # a held discarded job retried by an operator: its details go with it, alike
        discarded = [job_id for job_id, entry in before.jobs.items()
                     if peek(entry).state == "discarded"][:3]
        assert len(discarded) == (3 if shape == "discarded" else 0)
        for job_id in discarded:
            retry = c.Admin("p", "r", "retry_job", {"job_id": job_id.hex()})
            written = [(s, e.pair, e.raw) for s, e in
                       after.handle(retry, 20_000, 20_000).events]
            assert written and written == [
                (s, e.pair, e.raw) for s, e in before.handle(retry, 20_000, 20_000).events]
        assert_alike(after, before)


# ---- held rows built together (a compaction's builds) --------------------------------------

def unvouched(scan):
    """``scan`` with every row one the native scan could not vouch for: its status slow and
    its other slots zero, so a job built from them would be wrong."""
    def marked(buf, records, *limits):
        rows = scan(buf, records, *limits)
        return [_pure_events.EVENT_SLOW if k % (len(rows) // len(records)) == 0 else 0
                for k in range(len(rows))]
    return marked


@pytest.mark.parametrize("shape", ["discarded", "retried", "failed", "waiting", "success"])
def test_held_rows_build_together_what_they_build_one_by_one(shape) -> None:
    """A compaction builds the held jobs in chunks (``captured_states``: every snapshot in
    one native scan, every attachment in one decode): the same JobStates as one by one, for
    finished rows with a result, a failure's details or both, and live rows with their
    details; also where the scans vouch for nothing (each payload decoded the exact way),
    and for rows of two recoveries (their limits differ: built one by one)."""
    with recovered_both_ways(shape, 60, 7) as (_, before, after):
        capture, _ = after.online_capture()
        captured = [capture.row(job) if type(job) is int else job for job in capture.jobs]
        kinds = {type(job).__name__ for job in captured}
        assert kinds & {"JobRow", "BaseLiveRow"}, kinds
        alone = [captured_state(job) for job in captured]
        assert captured_states(captured) == alone
        assert capture.states_of(capture.jobs) == alone
        assert by_id(after.retained_jobs()) == by_id(before.retained_jobs())
        with unittest.mock.patch.object(_native, "snapshots_scan",
                                        unvouched(_native.snapshots_scan)), \
                unittest.mock.patch.object(_native, "events_scan",
                                           unvouched(_native.events_scan)):
            assert captured_states(captured) == alone
        rows = [job for job in captured if type(job) in (JobRow, BaseLiveRow)]
        other = DecodeLimits(LIMITS.depth, LIMITS.nodes, LIMITS.binary)
        for row in rows[::2]:
            row.limits = other
        assert captured_states(captured) == alone


def test_a_capture_reads_no_held_job_and_builds_them_as_they_were() -> None:
    """An online compaction's capture runs with the loop stopped: a job held in columns is
    captured as an int, its row made from its run on the worker thread (no row made and
    nothing read during the capture). The capture stays a snapshot: a held job taken out
    (read) or expired after it, and the run let go once it holds none, still build as
    they were, and every held job's plan, read from the columns, is its JobState's."""
    from tay.storage.v2.rows import BaseJobs, HeldJobs

    with recovered_both_ways("success", 40, 7) as (_, before, after):
        expected = by_id(before.retained_jobs())
        calls = []
        with unittest.mock.patch.object(HeldJobs, "row", lambda *a: calls.append(a)), \
                unittest.mock.patch.object(BaseJobs, "row", lambda *a: calls.append(a)):
            capture, _ = after.online_capture()
        assert calls == []
        held = [job for job in capture.jobs if type(job) is int]
        assert len(held) == len(capture.jobs) == len(expected)
        ids = [capture.id_of(job) for job in held]
        after.jobs[ids[0]].state  # taken out of its run
        assert after.expire(ids[1:]) == len(ids) - 1  # every other one expires
        assert list(after.finished.held_runs()) == []  # the runs are let go
        states = capture.states_of(capture.jobs)
        assert by_id(states) == expected
        plans_equal_builds(capture, states)


# ---- an operator deletes jobs the base holds in columns ----------------------------------

@contextlib.contextmanager
def built_then_dropped():
    """Recover as before deletions were dropped in place: every deleted job is built
    (taken out of its columns) and dropped as its install drops it."""
    drop = EpochEngine.epoch_drop_held
    EpochEngine.epoch_drop_held = lambda self, job_id, expected_revision: False
    try:
        yield
    finally:
        EpochEngine.epoch_drop_held = drop


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.one_of(WALK_ACTIONS, DELAYED_ACTIONS),
       st.lists(st.integers(0, 60), min_size=1, max_size=8), st.integers(0, 2))
def test_deletions_of_base_jobs_recover_the_same_dropped_in_place(seed, actions, deletes,
                                                                   damage) -> None:
    """A tail of an operator's deletions of jobs a base holds in columns: each dropped where
    it is held (its state and revision read in place, not built) recovers the same as when
    each is built and dropped, record by record or through the columns, or is refused the
    same way (``damage`` 1: the first deletion names a revision its job is not at; 2: a
    deletion of a job the base does not hold finished, sent the exact way)."""
    driver = tail_driver(seed, actions)
    first = len(driver.journal)
    frames = journal_frames(driver)
    ids = [payload[:16] for rtype, _, payload in frames if rtype == 8 and payload[16] == 1]
    for k in deletes if ids else ():
        driver.run(c.Admin("p", "x", "delete_job", {"job_id": ids[k % len(ids)].hex()}))
    frames = journal_frames(driver)
    base, tail = frames[:first], frames[first:]
    if tail and damage == 1:
        inner = decode_epoch_event(tail[0][2])
        event = inner.event
        tail[0] = (30, 2, encode_epoch_event(
            job_deleted(event["job_id"], event["at"], event["expected_revision"] + 1),
            inner.revision + 1))
    elif ids and damage == 2:  # a job's first insert: not finished at the base's capture
        tail.append((30, 2, encode_epoch_event(job_deleted(ids[0], T0, 1), 2)))
    root = scratch_path("base-deletions")
    try:
        write_store(root, base, compact=True, consumer=Engine(EngineConfig()))
        rewrite_tail(root, tail)
        with record_by_record(), tail_record_by_record(), built_then_dropped():
            plain = recovered_or_refused(root)
        with built_then_dropped():
            built = recovered_or_refused(root)
        same_engines(recovered_or_refused(root), plain)
        same_engines(built, plain)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_deletions_of_jobs_held_in_columns_build_none_of_them(monkeypatch) -> None:
    """Five finished jobs in a base's columns, three deleted in the tail: recovery drops the
    three where they are held, building none (the other two stay in the columns), and a
    live bulk deletion of the other two builds none either."""
    actions = [("enqueue", "a", None, {}), ("finish", 0, "nil")] * 5
    driver = tail_driver(7, actions)
    first = len(driver.journal)
    ids = [payload[:16] for rtype, _, payload in journal_frames(driver)
           if rtype == 8 and payload[16] == 1]
    for job_id in ids[:3]:
        driver.run(c.Admin("p", "x", "delete_job", {"job_id": job_id.hex()}))
    frames = journal_frames(driver)
    root = scratch_path("base-deletions")
    try:
        write_store(root, frames[:first], compact=True, consumer=Engine(EngineConfig()))
        rewrite_tail(root, frames[first:])
        built: list = []
        thaw = EpochEngine._thaw
        monkeypatch.setattr(EpochEngine, "_thaw",
                            lambda self, job_id: built.append(job_id) or thaw(self, job_id))
        engine = recovered_or_refused(root)
        assert built == [] and set(engine.finished.stamps) == set(ids[3:])
        assert not set(ids[:3]) & set(engine.jobs)
        reply = engine.handle(c.Admin("p", "d", "delete_jobs", {"state": "completed"}),
                              10**13, 10**9)
        assert [event.name for _, event in reply.events] == ["job_deleted"] * 2
        assert built == [] and len(engine.finished) == 0 and engine.job_count() == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("compact", [False, True])
def test_a_bulk_retry_builds_a_pages_rows_together_as_one_at_a_time(monkeypatch, compact):
    """``retry_jobs`` over discarded jobs a recovery holds as rows (a tail's failed rows, or
    a base's columns) builds each page's rows together: the records, replies and engine
    state are what building them one at a time gives."""
    from tay.engine.handlers import admin as admin_module

    actions = [("enqueue", "a", None, {}, 0), ("finish", 0, "failed"),
               ("enqueue", "a", None, {}), ("finish", 0, "nil")] * 6
    frames = journal_frames(tail_driver(3, actions))

    def run(together: bool):
        root = scratch_path("bulk-retry")
        try:
            write_store(root, frames, compact=compact, consumer=Engine(EngineConfig()))
            engine = recovered_or_refused(root)
            # the six discarded jobs are held unbuilt: failed rows, or in the base's columns
            assert len(engine.finished) + sum(
                type(entry) is LazyJobEntry for entry in engine.jobs.values()) >= 6
            if not together:
                monkeypatch.setattr(admin_module, "captured_states",
                                    lambda rows: [row.job_state() for row in rows])
            outs = [engine.handle(c.Admin("p", f"r{n}", "retry_jobs",
                                          {"state": "discarded", "limit": 4}), 10**13, 10**9)
                    for n in range(2)]
            monkeypatch.undo()
            return ([[bytes(event.raw) for _, event in out.events] for out in outs],
                    [out.effects for out in outs], bookkeeping(engine))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    together = run(True)
    assert [len(records) for records in together[0]] == [4, 2]
    assert together == run(False)

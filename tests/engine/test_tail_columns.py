"""The columnar tail replay (tay._native.tail_jobs, tay.storage.v2.tail) equals the
record-by-record replay.

Tails are written by a Store-v2 engine driven with random commands (enqueues, starts,
successes with nil and other results, failures, ticks), so they hold the common lifecycle
(insert, start, success, nil result), jobs that leave it and jobs still in flight at the
end. The native walk equals its pure twin on any range of such a tail, damaged or not; and
a store whose tail it is recovers to the same engine (counts, charges, stamps, ready keys,
timelines, the admin pages and reads, every job's JobState, what a compaction captures) with
the columnar tail replay as without it, or is refused the same way (class, reason, details).
"""

from __future__ import annotations

import contextlib
from array import array
import random
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tay import _native
from tay._native import _pure_events as er
from tay._native import _pure_mutations as mr
from tay._native import _pure_tail
from tay._native import _pure_base
from tay._native._pure_base import (BASE_JOB, COMPLETED, FRAME_HEADER, RESULT_LENGTH, REVISION,
                                     SNAPSHOT, STATE)
from tay.engine import commands as c
from tay.engine.core import Engine
from tay.engine.epoch import _RESULT_FIXED, EpochEngine
from tay.storage.compaction.space import estimate_job_bytes
from tay.engine.effects import Outcome
from tay.engine.retained.jobs import (
    CompletedRow, JobEntry, LazyJobEntry, StartedRow, peek, public_job,
)
from tay.failures import RecoveryRefused
from tay.storage.compaction.offline import compact_offline
from tay.storage.formats.record import FIXED_SIZE
from tay.storage.formats.value import encode as encode_value
from tay.storage.journal.writer import init_store
from tay.storage.recovery import store_v2
from tay.storage.events.operations import failure_recorded
from tay.storage.recovery.recover import TableConsumer
from tay.storage.v2 import Retention
from tay.storage.v2.epoch_records import decode_epoch_event, encode_epoch_event
from tay.storage.v2.rows import BaseReadFailed
from tests.engine.conftest import M0, T0
from tests.engine.test_fused_commits import epoch_driver
from tests.engine.test_lazy_rows import (
    all_entries, answers, bookkeeping, by_id, job_answers, recovered,
)
from tests.storage.conftest import scratch_path
from tests.storage.test_store_v2_rules import rewrite_tail
from tests.storage.test_v2_fast_path import LIMITS

# an enqueue: ("enqueue", task, delay_ms, args[, retries: 1 when absent])
ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(["a", "b"]), st.sampled_from([None, 0, 300]),
              st.sampled_from([{}, {"k": [1, "x"]}]), st.sampled_from([1, 1, 0])),
    st.tuples(st.just("start"), st.integers(0, 9)),
    st.tuples(st.just("finish"), st.integers(0, 9),
              st.sampled_from(["nil", "nil", "nil", "value", "failed"])),
    st.tuples(st.just("advance"), st.sampled_from([1, 400, 2500])),
    st.tuples(st.just("cancel"), st.integers(0, 9)),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    # an operator's retry: a cancelled job requeued, a scheduled one expedited, a failed one
    # retried (refused in other states)
    st.tuples(st.just("retry"), st.integers(0, 9)),
    st.just(("days",)),  # the server's minute: a (32,2) for each day counted since the last
    st.just(("schedule",)),  # an every-minute schedule of task a (an advance delivers it)
    st.tuples(st.just("queue"), st.sampled_from(["pause_queue", "resume_queue",
                                                 "scale_queue", "limit_queue"])),
), max_size=60)

# mostly the walk's common lifecycle (inserts available at once, nil successes) with worker
# failures and value results among them: tails whose walks reach done jobs in either order
WALK_ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("enqueue"), st.just("a"), st.sampled_from([None, None, None, 300]),
              st.just({}), st.sampled_from([1, 1, 0])),
    st.tuples(st.just("finish"), st.integers(0, 9),
              st.sampled_from(["nil", "nil", "nil", "failed", "value"])),
    st.just(("days",)),
    st.just(("schedule",)),
), max_size=60)

# delayed jobs and retries among the common lifecycle: most delayed jobs come due (an
# advance past their delay) and run to a nil success or a failure (retryable, or discarded
# without retries), some wait (a minute), some time out (500 ms); failed jobs'
# retries come due after the longer advance and mostly succeed; some fail again, record a
# value or are cancelled. Drawn from a seeded random.Random (hypothesis draws the seed and
# the length): hypothesis's own lists seldom reach a retry that succeeds
LATER_CHOICES = [
    ("enqueue", "a", None, {}), ("enqueue", "a", None, {}), ("enqueue", "a", None, {}, 0),
    ("enqueue", "a", 300, {}), ("enqueue", "a", 300, {}), ("enqueue", "a", 60_000, {}),
    ("enqueue", "a", 300, {}, 0), ("enqueue", "a", None, {}, 1, 500),
    ("enqueue", "a", 300, {}, 0, 500),
    ("finish", 0, "nil"), ("finish", 0, "nil"), ("finish", 0, "nil"), ("finish", 1, "nil"),
    ("finish", 0, "failed"), ("finish", 1, "failed"), ("finish", 0, "value"),
    ("advance", 400), ("advance", 2500), ("cancel", 0), ("cancel", 5), ("delete", 0),
    ("delete", 3), ("retry", 0), ("retry", 4), ("days",), ("schedule",),
    ("queue", "pause_queue"),
    ("queue", "resume_queue")]


def _later_actions(seed: int, length: int) -> list:
    rng = random.Random(seed)
    return [rng.choice(LATER_CHOICES) for _ in range(length)]


DELAYED_ACTIONS = st.builds(_later_actions, st.integers(0, 2**32), st.integers(5, 60))


def tail_frames(seed: int, actions: list) -> list[tuple[int, int, bytes]]:
    """The (type, schema, payload) records a Store-v2 engine writes for ``actions``."""
    return journal_frames(tail_driver(seed, actions))


def journal_frames(driver) -> list[tuple[int, int, bytes]]:
    return [(event.type, event.schema, bytes(event.raw)) for _, event in driver.journal]


def tail_driver(seed: int, actions: list):
    """A Store-v2 engine's driver (the fused commits on) after ``actions``."""
    driver = epoch_driver(seed, "none", True)
    for command in (c.Connect("w1", "worker", "rt-w1", 3, None, "h"),
                    c.RegisterTasks("w1", ("a", "b"), "rt")):
        driver.run(command)
    job_ids: list[str] = []
    for n, action in enumerate(actions):
        live = sorted(driver.engine.executors.reservations.values(),
                      key=lambda r: r.reservation_id)
        if action[0] == "enqueue":
            retries = action[4] if len(action) > 4 else 1
            options = {"delay_ms": action[2], "retries": retries}
            if len(action) > 5:  # a timeout (ms): the engine's tick times the job out
                options["timeout_ms"] = action[5]
            out = driver.run(c.Enqueue("p", f"e{n}", action[1], dict(action[3]), options))
            job_ids += [e.fields["job_id"] for e in out.effects
                        if type(e).__name__ == "Reply" and e.type == "enqueued"]
        elif action[0] in ("start", "finish") and live:
            r = live[action[1] % len(live)]
            ids = (r.reservation_id, r.execution_id)
            if action[0] == "start":
                driver.run(c.Started(r.conn, "s", *ids))
            elif action[2] == "failed":
                driver.run(c.Failed(r.conn, "f", *ids, {"type": "E", "message": "no"}))
            else:
                driver.run(c.Succeeded(r.conn, "d", *ids,
                                       None if action[2] == "nil" else {"ok": 1}))
        elif action[0] == "cancel" and job_ids:
            driver.run(c.Cancel("p", "x", job_ids[action[1] % len(job_ids)]))
        elif action[0] == "delete" and job_ids:  # a finished one (others are refused)
            driver.run(c.Admin("p", "x", "delete_job",
                               {"job_id": job_ids[action[1] % len(job_ids)]}))
        elif action[0] == "retry" and job_ids:  # requeue, expedite or retry (or refused)
            driver.run(c.Admin("p", "x", "retry_job",
                               {"job_id": job_ids[action[1] % len(job_ids)]}))
        elif action[0] == "advance":
            driver.advance(action[1])
            driver.tick()
        elif action[0] == "days":  # what the server does every minute
            driver.run(c.Admin("p", "x", "record_days", {}))
        elif action[0] == "schedule":  # declared once (then idempotent); ticks deliver it
            driver.run(c.Schedule("p", "s", {"declaration_id": "minutely", "task": "a",
                                             "every": {"minutes": 1}}))
        elif action[0] == "queue":  # an operator's control of the jobs' queue
            driver.run(c.Admin("p", "x", action[1], QUEUE_CONTROLS[action[1]]))
    return driver


QUEUE_CONTROLS = {"pause_queue": {"queue": "default"}, "resume_queue": {"queue": "default"},
                  "scale_queue": {"queue": "default", "concurrency": 2},
                  "limit_queue": {"queue": "default", "starts": 5, "period_ms": 1000}}


def finish_first(frames: list, which: int = -1) -> list:
    """``frames`` with successes and worker failures in the order stores written before
    2026-12-04 hold them: the finish (8,1), then the result (30,2) or the failure details
    (30,2) carrying (22,2), their revisions swapped accordingly (the engine writes the
    result or details first: docs/journal.md, "Repair"). ``which``: bit k set rewrites the
    k-th such pair (counted from 0 in tail order; the bits repeat past 63), so a drawn
    ``which`` mixes both orders in one tail; -1 rewrites them all."""
    out = list(frames)
    k = -1
    for i in range(len(out) - 1):
        (rtype, schema, carried), (ftype, fschema, finish) = out[i], out[i + 1]
        if (rtype, schema, ftype, fschema) != (30, 2, 8, 1) or finish[16] != 4 \
                or carried[:2] not in (b"\x0a\x02", b"\x16\x02"):
            continue
        if carried[:2] == b"\x0a\x02":
            fields = list(_RESULT_FIXED.unpack_from(carried))  # 10, 2, revision, .., expected
            revision, job_id = fields[2], fields[-1]
        else:
            inner = decode_epoch_event(carried)
            revision, job_id = inner.revision, inner.event["job_id"]
        if finish[:16] != job_id or int.from_bytes(finish[17:25], "big") != revision:
            continue
        k += 1
        if not (which >> (k % 64)) & 1:
            continue
        if carried[:2] == b"\x0a\x02":
            fields[2], fields[6] = revision + 1, revision
            later = _RESULT_FIXED.pack(*fields) + carried[_RESULT_FIXED.size:]
        else:
            event = inner.event
            later = encode_epoch_event(failure_recorded(event["job_id"], event["at"], revision,
                                                        event["error"]), revision + 1)
        out[i] = (8, 1, finish[:17] + (revision - 1).to_bytes(8, "big")
                  + revision.to_bytes(8, "big") + finish[33:])
        out[i + 1] = (30, 2, later)
    return out


def damaged(frames: list, damage: tuple[int, int]) -> list:
    """``frames`` with one record dropped, doubled, swapped with the next, a byte flipped, or
    a later insert given an earlier job's id."""
    kind, where = damage
    if not frames or kind == 0:
        return frames
    i = where % len(frames)
    frames = list(frames)
    if kind == 1:
        del frames[i]
    elif kind == 2:
        frames.insert(i, frames[i])
    elif kind == 3 and i + 1 < len(frames):
        frames[i], frames[i + 1] = frames[i + 1], frames[i]
    elif kind == 4:
        rtype, schema, payload = frames[i]
        at = (where // 7) % len(payload)
        frames[i] = (rtype, schema, payload[:at] + bytes([payload[at] ^ 0x01]) + payload[at + 1:])
    elif kind == 5:  # a later job takes an earlier job's id (its records still valid)
        inserts = [n for n, (t, s, p) in enumerate(frames) if (t, s) == (8, 1) and p[16] == 1]
        if len(inserts) >= 2:
            later = inserts[1 + where % (len(inserts) - 1)]
            earlier = inserts[(where // 3) % inserts.index(later)]
            old, new = frames[later][2][:16], frames[earlier][2][:16]
            frames[later:] = [(t, s, p.replace(old, new)) for t, s, p in frames[later:]]
    return frames


LIMITS_ = (LIMITS.depth, LIMITS.nodes, LIMITS.binary)
# which successes and failures take the older order (finish first): none, all, or a mix
OLDER = st.one_of(st.just(0), st.just(-1), st.integers(1, 2**64 - 1))
DAMAGE = st.one_of(st.just((0, 0)), st.tuples(st.integers(1, 5), st.integers(0, 10**6)))


def columns(frames: list) -> tuple:
    """The record columns a segment scan gives for ``frames`` framed back to back."""
    buf = _native.encode_records([(t, s, n, p) for n, (t, s, p) in enumerate(frames, 1)])
    offsets, at = [], 0
    for _, _, payload in frames:
        offsets.append(at)
        at += FIXED_SIZE + len(payload)
    return (buf, offsets, [len(p) for _, _, p in frames], bytes(t for t, _, _ in frames),
            bytes(s for _, s, _ in frames))


def walk_both(columns_: tuple, start: int, stop: int, next_order: int) -> tuple:
    """The C walk of ``columns_`` (``columns``' five) from ``start`` to ``stop``, checked
    equal to the pure twin's."""
    args = (*columns_, start, stop, next_order, *LIMITS_)
    walked = _native.tail_jobs(*args)
    assert walked == _pure_tail.tail_jobs(*args)
    return walked


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.one_of(ACTIONS, WALK_ACTIONS, DELAYED_ACTIONS), DAMAGE,
       st.one_of(st.just(0), st.integers(0, 40)), st.integers(0, 3), OLDER)
def test_the_native_walk_equals_its_twin(seed, actions, damage, start, order, old) -> None:
    frames = tail_frames(seed, actions)
    frames = damaged(finish_first(frames, old) if old else frames, damage)
    buf, offsets, lengths, types, schemas = columns(frames)
    start = min(start, len(frames))
    # the drawn start, then every insert available at once with the allocator at its order
    # (where a recovery's walk may begin after the exact replay of records the walk left):
    # from 0 alone the walk seldom passes the first delayed insert, value result or failure
    # and would seldom reach a done job in either order
    walks = {(start, stop, 1 + order) for stop in {start, (start + len(frames)) // 2,
                                                   len(frames)}}
    for i in range(start, len(frames)):
        row = _pure_tail._mutation(buf, offsets[i] + FRAME_HEADER, lengths[i], LIMITS_) \
            if types[i] == 8 else None
        if row is not None and row[mr.KIND] == 1 and not (row[er.NIL] >> mr.ORDER) & 1:
            walks.add((i, len(frames), row[mr.ORDER]))
        if types[i] == 30 and buf[offsets[i] + FRAME_HEADER] == 22:  # cut after details
            walks.add((start, i + 1, 1 + order))
    for start, stop, next_order in sorted(walks):
        walked = walk_both((buf, offsets, lengths, types, schemas), start, stop, next_order)
        # a live row is a pending insert whose job has no other record pending, or (an
        # executing row) no other than its start, the record START names
        pending, live = walked[4], walked[6]
        ids = [bytes(buf[offsets[i] + FRAME_HEADER:offsets[i] + FRAME_HEADER + 16])
               for i in pending[::4]]
        for k in range(0, len(live), _pure_tail.TAIL_LIVE):
            record, started = live[k + _pure_tail.RECORD], live[k + _pure_tail.START]
            at = offsets[record] + FRAME_HEADER
            assert record in pending[::4] and (types[record], buf[at + 16]) == (8, 1)
            job_id = bytes(buf[at:at + 16])
            if live[k + _pure_tail.STATE] in (_pure_tail.AVAILABLE, _pure_tail.SCHEDULED):
                # a scheduled row: a delayed insert, its job's only record taken
                assert started == record and ids.count(job_id) == 1
                assert (live[k + _pure_tail.STATE] == _pure_tail.SCHEDULED) == bool(
                    (_pure_tail._mutation(buf, at, lengths[record], LIMITS_)[er.NIL]
                     >> mr.ORDER) & 1)
                continue
            at = offsets[started] + FRAME_HEADER
            assert started > record and started in pending[::4]
            assert (types[started], bytes(buf[at:at + 16]), buf[at + 16]) == (8, job_id, 3)
            if live[k + _pure_tail.STATE] == _pure_tail.EXECUTING:
                assert ids.count(job_id) == 2
                continue
            if live[k + _pure_tail.STATE] == _pure_tail.COMPLETED:
                # a retried job's success: its eight records pending, in lifecycle order
                spans = {slot: live[k + slot] for slot in (
                    _pure_tail.FINISH, _pure_tail.DETAILS, _pure_tail.RETRY,
                    _pure_tail.RESTART, _pure_tail.RESULT, _pure_tail.COMPLETE)}
                # (ids: the first 16 bytes of each pending payload, a job's id in its
                # mutations: six of its eight records)
                assert set(spans.values()) <= set(pending[::4]) and ids.count(job_id) == 6
                assert started < min(spans[_pure_tail.FINISH], spans[_pure_tail.DETAILS])
                assert max(spans[_pure_tail.FINISH], spans[_pure_tail.DETAILS]) \
                    < spans[_pure_tail.RETRY] < spans[_pure_tail.RESTART] \
                    < min(spans[_pure_tail.RESULT], spans[_pure_tail.COMPLETE])
                assert [buf[offsets[spans[slot]] + FRAME_HEADER + 16] for slot in (
                    _pure_tail.FINISH, _pure_tail.RETRY, _pure_tail.RESTART,
                    _pure_tail.COMPLETE)] == [4, 2, 3, 4]
                continue
            # a retryable or discarded row: its other records pending are the failure's
            # finish and its details, the details before the finish or right after it (a
            # timeout's finish alone: DETAILS its insert's index), and a delayed job's
            # availability between its insert and start
            assert live[k + _pure_tail.STATE] in (_pure_tail.RETRYABLE, _pure_tail.DISCARDED)
            finish, details = live[k + _pure_tail.FINISH], live[k + _pure_tail.DETAILS]
            available = live[k + _pure_tail.AVAILABILITY_RECORD]
            delayed, timed_out = available != record, details == record
            assert sum(types[i] == 8 for i, one in zip(pending[::4], ids)
                       if one == job_id) == 3 + delayed
            assert finish in pending[::4] and started < finish
            at = offsets[finish] + FRAME_HEADER
            assert (types[finish], bytes(buf[at:at + 16]), buf[at + 16]) == (8, job_id, 4)
            if delayed:
                assert record < available < started and available in pending[::4]
                assert buf[offsets[available] + FRAME_HEADER + 16] == 2
            if timed_out:
                assert live[k + _pure_tail.FAILURE_BYTES] == 0
                continue
            assert details in pending[::4] and started < details
            assert (types[details], buf[offsets[details] + FRAME_HEADER]) == (30, 22)
            assert details < finish or details == finish + 1
            assert live[k + _pure_tail.FAILURE_BYTES] > 64


def test_the_common_lifecycle_is_taken_whole() -> None:
    actions = [("enqueue", "a", None, {})] * 3 + [("start", 0), ("finish", 0, "nil")] * 3
    frames = tail_frames(1, actions)
    for order in (frames, finish_first(frames)):  # result then finish, and the older order
        buf, offsets, lengths, types, schemas = columns(order)
        taken, next_order, rows, links, pending, totals, live = _native.tail_jobs(
            buf, offsets, lengths, types, schemas, 0, len(order), 1, *LIMITS_)
        assert (taken, next_order, len(rows) // BASE_JOB, len(pending), totals, len(live)) \
            == (12, 4, 3, 0, (9, 3, 0), 0)
        assert _pure_tail.tail_jobs(buf, offsets, lengths, types, schemas, 0, len(order), 1,
                                    *LIMITS_)[:2] == (12, 4)
    assert finish_first(frames) != frames
    # a value result is taken too, its canonical size the job's margin (RESULT_BYTES); the
    # other two jobs' inserts and starts are pending
    frames = tail_frames(1, actions[:3] + [("start", 0), ("finish", 0, "value")])
    buf, offsets, lengths, types, schemas = columns(frames)
    taken, _, rows, _, pending, _, live = _native.tail_jobs(
        buf, offsets, lengths, types, schemas, 0, len(frames), 1, *LIMITS_)
    assert taken == len(frames) == 8 and len(rows) == BASE_JOB and len(pending) == 4 * 4
    result = rows[_pure_base.RESULT]
    assert rows[_pure_base.RESULT_BYTES] == len(encode_value({"ok": 1})) \
        and buf[result:result + 2] == b"\x0a\x02"
    # the jobs it took only the insert of, or the insert and the start, are also live rows,
    # in insert order (here the two jobs left executing; the general one is not)
    at = [offsets[i] + FRAME_HEADER for i in range(len(offsets))]
    inserts = [i for i in pending[::4] if types[i] == 8 and buf[at[i] + 16] == 1]
    finished = {bytes(buf[at[i]:at[i] + 16]) for i in pending[::4] if buf[at[i] + 16] == 4}
    assert list(live[_pure_tail.RECORD::_pure_tail.TAIL_LIVE]) == [
        i for i in inserts if bytes(buf[at[i]:at[i] + 16]) not in finished]
    assert list(live[_pure_tail.STATE::_pure_tail.TAIL_LIVE]) == [_pure_tail.EXECUTING] * 2
    # a retried success is held as a completed live row, its records pending, whatever its
    # result (the row's RESULT_BYTES: its canonical size, in the margin with the details')
    for result, held in (("value", 1), ("nil", 1)):
        frames = tail_frames(1, [("enqueue", "a", None, {}), ("finish", 0, "failed"),
                                 ("advance", 2500), ("finish", 0, result)])
        buf, offsets, lengths, types, schemas = columns(frames)
        taken, _, rows, _, pending, _, live = _native.tail_jobs(
            buf, offsets, lengths, types, schemas, 0, len(frames), 1, *LIMITS_)
        assert (taken, len(rows), len(pending), len(live) // _pure_tail.TAIL_LIVE) == \
            (8, 0, 4 * 8, held)
        assert live[_pure_tail.RESULT_BYTES] == len(encode_value(None if result == "nil"
                                                                 else {"ok": 1}))


def test_a_days_totals_do_not_stop_the_walk() -> None:
    """The (32,2) the server writes every minute is no job's: the walk takes it as pending
    (in its place, between the jobs it holds) and goes on, so a daemon's minutes cost its
    restart no run of exact replay; the recovery counts the same days either way."""
    job = [("enqueue", "a", None, {}), ("start", 0), ("finish", 0, "nil")]
    frames = tail_frames(1, job * 2 + [("days",)] + job * 2 + [("days",)] + job)
    buf, offsets, lengths, types, schemas = columns(frames)
    days = [i for i in range(len(frames))
            if types[i] == 30 and buf[offsets[i] + FRAME_HEADER] == 32]
    assert len(days) == 2 and len(frames) == 5 * 4 + 2
    taken, next_order, rows, links, pending, totals, live = walk_both(
        (buf, offsets, lengths, types, schemas), 0, len(frames), 1)
    assert (taken, next_order, len(rows) // BASE_JOB, totals, len(live)) \
        == (len(frames), 6, 5, (15, 5, 0), 0)
    # each pending with the state changes and ready pushes of the records before it
    assert list(pending) == [days[0], 6, 2, 0, days[1], 12, 4, 0]
    installed: list = []
    install = EpochEngine.epoch_install_tail
    EpochEngine.epoch_install_tail = lambda self, jobs, inserted: (
        installed.append(len(jobs.links) // _pure_tail.TAIL_LINK), install(self, jobs, inserted))[1]
    try:
        engine = recovers_the_same_from(frames, 256)
    finally:
        EpochEngine.epoch_install_tail = install
    assert installed == [5]  # one walk held every job in columns
    # the day as its last record counted it (four jobs: the fifth came after it)
    assert engine.day_history.recorded == {T0 // 86_400_000: (4, 4, 0)}
    # a day's totals whose chain is broken is refused where it stands, as record by record
    broken = list(frames)
    broken[days[1]], broken[days[0]] = frames[days[0]], frames[days[1]]
    assert recovers_the_same_from(broken, 256) is None


def test_the_walk_passes_exactly_the_events_of_no_job() -> None:
    """The inner pairs the walk takes as records of no job are the epoch-carried pairs
    whose entity is not a job: a new one must be weighed here (does its replay read or
    change a job?), not passed or stopped at by accident."""
    from tay.storage.events.registry import _EPOCH, job_entity

    assert {(t, 2) for t in _pure_tail.OF_NO_JOB} == {
        pair for pair, carry in _EPOCH.items() if carry.entity is not job_entity}


def test_the_walk_takes_every_job_scoped_event_a_tail_carries() -> None:
    """The job-scoped pairs a (30,2) carries: a result and a failure's details, which the
    lifecycles hold, and an operator's requeue, expedite and deletion, which send their job
    the general way. None stops the walk."""
    from tay.storage.events.registry import _EPOCH, job_entity

    assert {(t, 2) for t in {10, 22} | _pure_tail.JOB_STEPS} == {
        pair for pair, carry in _EPOCH.items() if carry.entity is job_entity}


def test_an_operators_steps_of_jobs_do_not_stop_the_walk() -> None:
    """An operator's requeue of a cancelled job (23,2) and expedite of a delayed one (27,2)
    send only the jobs they name the general way, and a deletion (29,2) of a job done in
    the walk leaves it in columns until the deletion's exact replay drops it there: the
    walk takes the whole tail, and the store recovers the same, the requeue's and the
    expedite's orders the allocator's."""
    job = [("enqueue", "a", None, {}), ("finish", 0, "nil")]
    actions = job * 2 + [("enqueue", "z", None, {}), ("cancel", 2), ("retry", 2),
                         ("enqueue", "a", 60_000, {}), ("retry", 3), ("finish", 0, "nil")] \
        + job + [("delete", 0), ("delete", 4)] + job * 3
    frames = tail_frames(3, actions)
    buf, offsets, lengths, types, schemas = columns(frames)
    steps = [i for i in range(len(frames)) if types[i] == 30
             and buf[offsets[i] + FRAME_HEADER] in _pure_tail.JOB_STEPS]
    assert sorted(buf[offsets[i] + FRAME_HEADER] for i in steps) == [23, 27, 29, 29]
    taken, _, rows, _, pending, totals, _ = walk_both(
        (buf, offsets, lengths, types, schemas), 0, len(frames), 1)
    assert taken == len(frames) and set(steps) <= set(pending[::4])
    # jobs 0, 1 and 4 to 7 done in columns (the deletions of 0 and 4, pending, drop them
    # from there in their place); the requeued and expedited ones pending
    assert len(rows) // BASE_JOB == 6
    # every (8,1) and the requeue and the expedite change a job's state
    assert totals[0] == sum(1 for t in types if t == 8) + 2
    for batch in (1, 3, 256):
        recovers_the_same_from(frames, batch)
    with tail_store(frames, 256) as root:
        engine = recovered(root)
    ids = [bytes(buf[offsets[i] + FRAME_HEADER:offsets[i] + FRAME_HEADER + 16])
           for i in range(len(frames))
           if types[i] == 8 and buf[offsets[i] + FRAME_HEADER + 16] == 1]  # inserts
    assert engine._entry(ids[2]).state.state == "available"  # requeued
    assert engine._entry(ids[3]).state.state == "completed"  # expedited, then run
    assert ids[0] not in engine.jobs and ids[4] not in engine.jobs  # deleted
    assert not engine.finished.where(ids[0]) and not engine.finished.where(ids[4])


def test_a_schedules_occurrences_and_an_operators_queue_controls_do_not_stop_the_walk() -> None:
    """A schedule's delivery (11,2) and state (13,2), written at each occurrence, and the
    queue controls are taken as pending records of no job; the jobs around them are held
    as the walk holds any, and the store recovers the same (the delivered jobs name their
    schedule)."""
    job = [("enqueue", "a", None, {}), ("start", 0), ("finish", 0, "nil")]
    actions = [("schedule",)] + job * 2 + [("advance", 60_000), ("finish", 0, "nil")] \
        + [("queue", name) for name in QUEUE_CONTROLS] + [("queue", "resume_queue")] \
        + job * 2 + [("advance", 60_000), ("finish", 0, "nil")] + job
    frames = tail_frames(1, actions)
    buf, offsets, lengths, types, schemas = columns(frames)
    inner = [buf[offsets[i] + FRAME_HEADER] for i in range(len(frames)) if types[i] == 30]
    assert {11, 13, 20, 21, 24, 28} <= set(inner)
    taken, _, rows, _, pending, _, _ = walk_both((buf, offsets, lengths, types, schemas), 0,
                                                 len(frames), 1)
    no_job = [i for i in range(len(frames)) if types[i] == 30
              and buf[offsets[i] + FRAME_HEADER] in _pure_tail.OF_NO_JOB]
    assert taken == len(frames) and set(no_job) <= set(pending[::4])
    # all seven jobs done in columns, the two occurrences' jobs too: their deliveries only
    # name them (the engine keeps the link beside the columns), and none of their records
    # is pending
    assert len(rows) // BASE_JOB == 7
    delivered_ids = {bytes(buf[offsets[i] + FRAME_HEADER:offsets[i] + FRAME_HEADER + 16])
                     for i in range(len(frames)) if types[i] == 8
                     and buf[offsets[i] + FRAME_HEADER + 16] == 1
                     and types[i + 1] == 30 and buf[offsets[i + 1] + FRAME_HEADER] == 11}
    assert len(delivered_ids) == 2
    assert not any(types[i] == 8 for i in pending[::4])
    recovers_the_same_from(frames, 256)  # the delivered jobs name their schedule alike
    with tail_store(frames, 256) as root:
        engine = recovered(root)
    held = set(engine.finished.stamps)
    assert delivered_ids <= held and set(engine.schedule_links) == delivered_ids
    named = {job_id for job_id, entry in all_entries(engine).items()
             if entry.schedule_id == "minutely"}
    assert named == delivered_ids  # read in place: none taken out
    assert set(engine.finished.stamps) == held
    assert {job_id for job_id in delivered_ids  # taken out, the entry names it
            if engine._entry(job_id).schedule_id == "minutely"} == delivered_ids
    assert not engine.schedule_links


def test_a_delivered_jobs_link_to_its_schedule_leaves_with_the_job() -> None:
    """The link a delivery left beside a job held in columns goes with the job: taken out
    (its entry holds it), deleted, expired. A parked job's tuple holds its own link, and a
    link of an id that nothing holds is dropped when recovery is over: no link outlives
    its job in a long-running server."""
    occurrence = [("advance", 60_000), ("finish", 0, "nil")]
    frames = tail_frames(2, [("schedule",)] + occurrence * 3)
    with tail_store(frames, 256) as root:
        engine = recovered(root)
    links = dict(engine.schedule_links)
    assert len(links) == 3 and set(links.values()) == {"minutely"}
    assert set(links) <= set(engine.finished.stamps)  # done in columns, not taken out
    taken, deleted, expired = sorted(links)
    assert engine._entry(taken).schedule_id == "minutely"
    engine.remove_job(deleted)  # what a deletion's install does
    assert engine.expire([expired]) == 1
    assert not engine.schedule_links
    engine.start_packing()
    engine.pack_finished(100)  # the first round only counts the jobs it will take
    engine.pack_finished(100)
    assert taken in engine.finished.packed
    engine.link_schedule(taken, "another")  # parked: its tuple names it
    assert engine._finished_entry(taken).schedule_id == "another"
    assert not engine.schedule_links
    engine.link_schedule(b"\x01" * 16, "minutely")  # an id no record inserts
    engine.finish_recovery(10_000, 10_000)
    assert not engine.schedule_links


def test_jobs_inserted_before_the_walk_go_the_general_way_and_the_walk_goes_on() -> None:
    """A walk that starts after a job's insert (a tail's first records after a compaction,
    or those after an exact batch) holds that job by its id, sends it the general way and
    goes on; an insert under a held id (one the engine may still hold) stops it."""
    job = [("enqueue", "a", None, {}), ("start", 0), ("finish", 0, "nil")]
    frames = tail_frames(1, job * 3)
    buf, offsets, lengths, types, schemas = columns(frames)
    for start in (1, 2, 3):  # after the first job's insert, start, result
        taken, _, rows, _, pending, _, live = walk_both(
            (buf, offsets, lengths, types, schemas), start, len(frames), 2)
        assert taken == len(frames) and len(rows) // BASE_JOB == 2 and live == array("Q")
        assert list(pending[::4]) == list(range(start, 4))
    # the first job's insert again after its other records: the walk stops before it
    again = frames[1:4] + frames[:1] + frames[4:]
    buf, offsets, lengths, types, schemas = columns(again)
    assert walk_both((buf, offsets, lengths, types, schemas), 0, len(again), 1)[0] == 3


def test_a_deleted_jobs_stale_timer_never_fires_for_a_new_job_under_its_id() -> None:
    """A delayed job cancelled and deleted leaves its timer entry in the heap; a new job
    under its id is revision 1 again (Store v2), so that entry had its key: at the old due
    time the engine made the new job available before it was due (the availability event
    refused it and the tick raised). The entry is stale before the job's due time; a
    recovery, columnar or record by record, holds the same timers."""
    driver = epoch_driver(0, "none", True)
    for command in (c.Connect("w1", "worker", "rt-w1", 3, None, "h"),
                    c.RegisterTasks("w1", ("a",), "rt")):
        driver.run(command)
    job_id = "ab" * 16
    driver.run(c.Enqueue("p", "e", "a", {}, {"delay_ms": 60_000, "id": job_id}))
    driver.run(c.Cancel("p", "x", job_id))
    driver.run(c.Admin("p", "x", "delete_job", {"job_id": job_id}))
    driver.run(c.Enqueue("p", "e", "a", {}, {"delay_ms": 120_000, "id": job_id}))
    driver.advance(61_000)
    assert driver.tick().effects == []
    assert driver.engine.jobs[bytes.fromhex(job_id)].state.state == "scheduled"
    recovered_engine = recovers_the_same_from(journal_frames(driver), 1)
    assert live_timers(recovered_engine)[0] == [
        (T0 + 120_000, 2, (bytes.fromhex(job_id), 1))]
    driver.advance(60_000)
    assert [type(effect).__name__ for effect in driver.tick().effects] == ["Execute"]


@pytest.mark.parametrize("leaves", ["expired", "expired_volatile"])
def test_an_expired_jobs_stale_timer_never_fires_for_a_new_job_under_its_id(leaves) -> None:
    """As a deletion, an expiry (a published compaction's, or a volatile job's under the
    terminal retention) frees the id of a cancelled delayed job whose timer entry is still
    in the heap: a new job under the id, due later, is not made available at the old due
    time (the availability event refused it and the tick raised)."""
    from tay.storage.v2.manifest import Retention

    driver = epoch_driver(0, "none", True)
    for command in (c.Connect("w1", "worker", "rt-w1", 3, None, "h"),
                    c.RegisterTasks("w1", ("a",), "rt")):
        driver.run(command)
    job_id = "cd" * 16
    durability = {"durability": "volatile"} if leaves == "expired_volatile" else {}
    driver.run(c.Enqueue("p", "e", "a", {},
                         {"delay_ms": 3 * 3_600_000, "id": job_id, **durability}))
    driver.run(c.Cancel("p", "x", job_id))
    driver.advance(3_600_001)
    if leaves == "expired":
        assert driver.engine.expire([bytes.fromhex(job_id)]) == 1
    else:
        assert driver.engine.expire_volatile(Retention("hours", 1), driver.now) == 1
    driver.run(c.Enqueue("p", "e", "a", {},
                         {"delay_ms": 4 * 3_600_000, "id": job_id, **durability}))
    driver.advance(2 * 3_600_000)  # past the cancelled job's due time
    assert driver.tick().effects == []
    assert driver.engine.jobs[bytes.fromhex(job_id)].state.state == "scheduled"
    driver.advance(2 * 3_600_000)
    assert [type(effect).__name__ for effect in driver.tick().effects] == ["Execute"]


def test_a_tail_in_the_older_order_recovers_the_same_jobs() -> None:
    """Successes and worker failures written finish first (stores before 2026-12-04) or
    result / details first (the engine now) recover to the same JobState for every job,
    with the columnar tail replay or without; the walk takes a failure's records in either
    order, sending its job the general way, and goes on to the end of the tail."""
    actions = ([("enqueue", "a", None, {})] * 4
               + [("start", 0), ("finish", 0, "nil"), ("finish", 0, "failed"),
                  ("finish", 0, "value"), ("finish", 0, "failed"), ("advance", 2500)]) * 2
    frames = tail_frames(4, actions)
    assert sum(p[:2] == b"\x16\x02" for t, s, p in frames if t == 30) >= 2
    states = []
    for order in (frames, finish_first(frames), finish_first(frames, 0b0101)):
        buf, offsets, lengths, types, schemas = columns(order)
        stops = {_native.tail_jobs(buf, offsets, lengths, types, schemas, 0, len(order), 1,
                                   *LIMITS_)[0],
                 _pure_tail.tail_jobs(buf, offsets, lengths, types, schemas, 0, len(order), 1,
                                      *LIMITS_)[0]}
        assert stops == {len(order)}  # the same in both walks: past every failure
        root = scratch_path("tail-columns")
        try:
            empty_store(root)
            rewrite_tail(root, order)
            columnar = recovered(root)
            with record_by_record():
                plain = recovered(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        jobs = {job_id: entry.state for job_id, entry in all_entries(plain).items()}
        assert {job_id: columnar.jobs[job_id].state for job_id in jobs} == jobs
        assert any(job.failure is not None for job in jobs.values())
        states.append(jobs)
    assert states[0] == states[1] == states[2]
    assert finish_first(frames) != finish_first(frames, 0b0101) != frames


def assert_same_jobs(engine, plain) -> None:
    """Every job of ``plain`` (built as it is read) has the same state and attempts in
    ``engine``, and reading them leaves the two engines' bookkeeping equal."""
    for job_id, entry in all_entries(plain).items():
        assert engine.jobs[job_id].state == entry.state
        assert engine.jobs[job_id].attempts == entry.attempts
    assert bookkeeping(engine) == bookkeeping(plain)


def empty_store(root) -> None:
    """A Store-v2 store with an empty base (its tail is then rewritten)."""
    init_store(str(root), durability="write")
    compact_offline(str(root), consumer=TableConsumer(), durability="write",
                    retention=Retention("infinity"), now_ms=lambda: 1_000)


@contextlib.contextmanager
def record_by_record():
    """Recover as before the columnar tail: the engine offers no ``epoch_install_tail``."""
    methods = EpochEngine.epoch_install_tail, EpochEngine.epoch_counters
    del EpochEngine.epoch_install_tail, EpochEngine.epoch_counters
    try:
        yield
    finally:
        EpochEngine.epoch_install_tail, EpochEngine.epoch_counters = methods


@contextlib.contextmanager
def not_activated():
    """Recover without settling the executions left running (``finish_recovery`` only
    checks the budget), to see what replay left."""
    settle = Engine.finish_recovery
    Engine.finish_recovery = lambda self, now_ms, mono_ms: (
        self.budget.check_recovered() or Outcome())
    try:
        yield
    finally:
        Engine.finish_recovery = settle


@contextlib.contextmanager
def tail_store(frames: list, batch: int):
    """A Store-v2 store whose tail is ``frames`` (an empty base), replayed ``batch`` records
    at a time between walks; removed afterwards."""
    root = scratch_path("tail-columns")
    saved = store_v2._BATCH
    try:
        empty_store(root)
        rewrite_tail(root, frames)
        store_v2._BATCH = batch
        yield root
    finally:
        store_v2._BATCH = saved
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def installs_seen():
    """The kinds of row the recovery hands to ``epoch_install_live``, in order."""
    installed: list = []
    install = EpochEngine.epoch_install_live
    EpochEngine.epoch_install_live = lambda self, row: (
        installed.append(type(row).__name__), install(self, row))
    try:
        yield installed
    finally:
        EpochEngine.epoch_install_live = install


def both_recovered(root) -> tuple:
    """The store at ``root`` recovered with the columnar tail replay and record by record,
    neither activated (what replay left)."""
    with not_activated():
        engine = recovered(root)
        with record_by_record():
            return engine, recovered(root)


def outcome(root):
    try:
        return recovered(root)
    except RecoveryRefused as refused:
        return (refused.kind, refused.reason, refused.details)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), ACTIONS, DAMAGE, st.sampled_from([1, 3, 256]), OLDER)
def test_a_tail_recovers_the_same_with_columns_or_refuses_the_same(seed, actions, damage,
                                                                    batch, old) -> None:
    recovers_the_same(seed, actions, damage, batch, old)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), DELAYED_ACTIONS, DAMAGE, st.sampled_from([1, 3, 256]), OLDER)
def test_a_tail_of_delayed_jobs_recovers_the_same(seed, actions, damage, batch, old) -> None:
    """Done delayed jobs held in columns, waiting ones and retried successes held as rows,
    the others replayed:
    the same recovery as record by record, or the same refusal of a damaged tail (the
    walks C == pure twin)."""
    frames = tail_frames(seed, actions)
    frames = damaged(finish_first(frames, old) if old else frames, damage)
    walk_both(columns(frames), 0, len(frames), 1)
    recovers_the_same(seed, actions, damage, batch, old)


# six enqueues for a worker of capacity 3, then a nil success (which starts a fourth): the
# walk takes a done job and leaves two jobs at their insert, held as rows (LiveRow)
WAITING = [("enqueue", "a", None, {})] * 6 + [("finish", 0, "nil")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), ACTIONS, DAMAGE, st.sampled_from([1, 3, 256]))
def test_jobs_left_at_their_insert_recover_the_same_held_as_rows(seed, actions, damage,
                                                                  batch) -> None:
    # not activated: the jobs left executing (built from the walk's rows) are compared as
    # replay left them; the test above compares them after the activation interrupts them
    with not_activated():
        recovers_the_same(seed, WAITING + actions, damage, batch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), ACTIONS)
@example(0, [])
def test_the_live_engines_row_backed_jobs_equal_the_replayed_ones(seed, actions) -> None:
    """The jobs a live engine keeps as the fused start's and success's rows (StartedRow,
    CompletedRow) build the JobState the reducer replays from the records that engine
    wrote, their row attributes read like it, and reading ``state`` builds it once."""
    driver = tail_driver(seed, WAITING + actions)
    live = driver.engine
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        rewrite_tail(root, journal_frames(driver))
        with record_by_record(), not_activated():
            plain = recovered(root)
        replayed = all_entries(plain)
        rows = {job_id: peek(entry) for job_id, entry in live.jobs.items()
                if type(peek(entry)) in (StartedRow, CompletedRow)}
        if not actions:  # WAITING's success and starts (a later read, e.g. a cancel, builds)
            assert sorted(type(row).__name__ for row in rows.values()) == [
                "CompletedRow", "StartedRow", "StartedRow", "StartedRow"]
        for job_id, row in rows.items():
            job = replayed[job_id].state
            assert row.job_state() == job
            assert (row.id, row.state, row.revision, row.terminal, row.terminal_at,
                    row.ready_order) == (job.id, job.state, job.revision, job.terminal,
                                         job.terminal_at, job.ready_order)
            entry = live.jobs[job_id]
            assert type(entry) is LazyJobEntry
            assert entry.state == job and type(entry) is JobEntry and peek(entry) is entry.state
    finally:
        shutil.rmtree(root, ignore_errors=True)


def recovers_the_same(seed, actions, damage, batch, old=0) -> None:
    """``old``: which successes and failures the tail holds finish first (stores before
    2026-12-04; ``finish_first``)."""
    frames = tail_frames(seed, actions)
    recovers_the_same_from(damaged(finish_first(frames, old) if old else frames, damage), batch)


def recovers_the_same_from(frames: list, batch: int):
    """A store whose tail is ``frames`` recovers the same with the columnar tail replay as
    without (or is refused the same way); returns the columnar engine (None: refused)."""
    root = scratch_path("tail-columns")
    saved = store_v2._BATCH
    try:
        empty_store(root)
        rewrite_tail(root, frames)
        store_v2._BATCH = batch  # later batches start more walks, after records it left
        with record_by_record():
            plain = outcome(root)
        return same_engines(outcome(root), plain)
    finally:
        store_v2._BATCH = saved
        shutil.rmtree(root, ignore_errors=True)


def same_engines(columnar, plain):
    """Two recoveries of one store (``outcome``s) hold the same jobs, indexes and counters
    and answer alike, or were refused the same way; returns ``columnar`` (None: refused)."""
    if isinstance(plain, tuple):
        assert columnar == plain
        return None
    assert bookkeeping(columnar) == bookkeeping(plain)
    assert live_timers(columnar) == live_timers(plain)
    assert answers(columnar) == answers(plain)
    for job_id, entry in all_entries(plain).items():
        assert job_answers(columnar, job_id) == job_answers(plain, job_id)
        assert public_job(columnar.jobs[job_id]) == public_job(plain.jobs[job_id])
        assert columnar.jobs[job_id].state == plain.jobs[job_id].state
        assert columnar.jobs[job_id].attempts == plain.jobs[job_id].attempts
    assert by_id(columnar.retained_jobs()) == by_id(plain.retained_jobs())
    captured_equal_alone_and_together(columnar)
    assert bookkeeping(columnar) == bookkeeping(plain)
    assert columnar.durable_executing == plain.durable_executing
    return columnar


def captured_equal_alone_and_together(engine) -> list:
    """What a compaction captures builds the same jobs one at a time as in chunks of any
    size (``captured_states``: the finished tail jobs decoded together), and a held row's
    plan (``captured_plan``) reads what its JobState holds; returns them."""
    captured, _ = engine.online_capture()
    jobs = captured.jobs
    alone = [captured.state_of(job) for job in jobs]
    for size in (1, 3, 256):
        together = [state for start in range(0, len(jobs), size)
                    for state in captured.states_of(jobs[start:start + size])]
        assert together == alone
    plans_equal_builds(captured, alone)
    return captured


def plans_equal_builds(captured, states: list) -> None:
    """Each captured row's plan has its built JobState's id, state, revision, terminal_at
    and base estimate, and every captured job its id."""
    for job, state in zip(captured.jobs, states):
        assert captured.id_of(job) == state.id
        planned = captured.plan_of(job)
        if planned is not None:
            view, estimate = planned
            assert (view.id, view.state, view.revision, view.terminal_at) == (
                state.id, state.state, state.revision, state.terminal_at)
            assert estimate == estimate_job_bytes(state)


# worker failures among nil successes (a worker of capacity 3, one retry): a job fails
# twice (retryable, then discarded), one fails and is cancelled while retryable, one fails
# and runs again to a success; then more successes, three jobs left executing and two
# waiting (their ready keys count the ready pushes before them)
FAILURES = ([("enqueue", "a", None, {})] * 6
            + [("finish", 0, "failed"), ("finish", 0, "nil"), ("finish", 0, "failed"),
               ("advance", 2500), ("finish", 0, "nil"), ("finish", 0, "nil"),
               ("finish", 0, "failed"), ("advance", 2500), ("finish", 0, "failed"),
               ("finish", 0, "nil"), ("cancel", 3)]
            + [("enqueue", "a", None, {})] * 5 + [("finish", 0, "nil")] * 3
            + [("enqueue", "a", None, {})] * 3)


def owners(frames: list) -> list[bytes]:
    """The job id of each record (mutations, results and failure details)."""
    return [payload[:16] if rtype == 8 else decode_epoch_event(payload).event["job_id"]
            for rtype, _, payload in frames]


def test_a_failed_job_goes_the_general_way_and_the_walk_goes_on() -> None:
    """A worker failure's records, in either order (and mixed), leave its job pending: the
    walk takes every record to the end of the tail, holds the successes as done jobs, and
    leaves every record of a failed job (before and after the failure) pending with the
    state changes, ready pushes and skipped timer pushes of all records before it: one per
    mutation, one per mutation carrying an order (the inserts, the failed jobs'
    availabilities), and one per timer push replay makes for the job whose retry succeeded
    (held as a completed row: at its failure's finish, and at its details when they came
    after the finish)."""
    frames = tail_frames(9, FAILURES)
    for order in (frames, finish_first(frames), finish_first(frames, 0b0101)):
        buf, offsets, lengths, types, schemas = columns(order)
        walked = walk_both((buf, offsets, lengths, types, schemas), 0, len(order), 1)
        taken, next_order, rows, _, pending, totals, live = walked
        ids = owners(order)
        failed = {ids[i] for i, (t, _, p) in enumerate(order) if t == 30 and p[0] == 22}
        done = {bytes(buf[at:at + 16]) for at in rows[SNAPSHOT::BASE_JOB]}  # the insert
        assert taken == len(order) and len(failed) == 3 and len(done) == 6
        assert not failed & done and len(live) == 6 * _pure_tail.TAIL_LIVE
        (retried,) = [k for k in range(0, len(live), _pure_tail.TAIL_LIVE)
                      if live[k + _pure_tail.STATE] == _pure_tail.COMPLETED]
        finish, details = live[retried + _pure_tail.FINISH], live[retried + _pure_tail.DETAILS]
        skips = [finish] + ([details] if details > finish else [])
        assert {i for i in range(len(order)) if ids[i] in failed} <= set(pending[::4])
        assert not any(ids[i] in done for i in pending[::4])
        mutations = [i for i in range(len(order)) if types[i] == 8]
        ordered = [i for i in mutations if not (_pure_tail._mutation(
            buf, offsets[i] + FRAME_HEADER, lengths[i], LIMITS_)[er.NIL] >> mr.ORDER) & 1]
        assert len(ordered) == 14 + 2  # the inserts and the two availabilities after a failure
        assert totals == (len(mutations), len(ordered), len(skips)) \
            and next_order == 1 + len(ordered)
        for k in range(0, len(pending), 4):
            i = pending[k]
            assert list(pending[k + 1:k + 4]) == [sum(m < i for m in mutations),
                                                  sum(m < i for m in ordered),
                                                  sum(m < i for m in skips)]
    # a walk that ends between a failure's details and its finish (the engine's order) leaves
    # that job pending, not held as a live executing row
    first = min(i for i, (t, _, p) in enumerate(frames) if t == 30 and p[0] == 22)
    buf, offsets, lengths, types, schemas = columns(frames)
    assert (types[first + 1], frames[first + 1][2][16]) == (8, 4)
    walked = walk_both((buf, offsets, lengths, types, schemas), 0, first + 1, 1)
    assert walked[0] == first + 1
    ids = owners(frames)
    assert first in walked[4][::4]
    assert ids[first] not in {ids[i] for i in walked[6][_pure_tail.RECORD::_pure_tail.TAIL_LIVE]}


# a delayed job among nil successes runs to its own success (revision 5), then a failure
# leaves a job retryable (a timer entry pushed after the delayed job's stale one), two
# delayed jobs wait for their due time, and two jobs wait at their insert
DELAYED = ([("enqueue", "a", None, {}), ("enqueue", "a", 300, {}), ("finish", 0, "nil"),
            ("advance", 400), ("finish", 0, "nil"), ("finish", 0, "nil")]
           + [("enqueue", "a", None, {}), ("finish", 0, "nil")] * 3
           + [("enqueue", "a", None, {}), ("finish", 0, "failed")]
           + [("enqueue", "a", 60_000, {})] * 2 + [("enqueue", "a", None, {})] * 4)


def delayed_inserts(frames: list, buf, offsets, lengths, types) -> list[int]:
    return [i for i in range(len(frames)) if types[i] == 8 and frames[i][2][16] == 1
            and (_pure_tail._mutation(buf, offsets[i] + FRAME_HEADER, lengths[i],
                                      LIMITS_)[er.NIL] >> mr.ORDER) & 1]


@pytest.mark.parametrize("old", [0, -1])
@pytest.mark.parametrize("batch", [1, 256])
def test_a_delayed_job_is_followed_through_its_availability(old, batch) -> None:
    """A delayed insert (no order, a timer push) is followed through its availability (the
    allocator's order, a ready push), its start and its success, each one revision later
    than an insert available at once: the done job is held in columns at revision 5, none
    of its records pending, and every pending record after its insert counts the timer
    push replay made there (stale by the end), so later timer entries get replay's
    tiebreak. A delayed job still waiting for its due time is held as a ``ScheduledRow``.
    The store recovers as record by record (the same JobStates, timelines, live timer
    entries and push counter, bookkeeping), in either order of result and finish."""
    frames = tail_frames(13, DELAYED)
    frames = finish_first(frames, old) if old else frames
    buf, offsets, lengths, types, schemas = columns(frames)
    walked = walk_both((buf, offsets, lengths, types, schemas), 0, len(frames), 1)
    taken, _, rows, links, pending, totals, live = walked
    ids = owners(frames)
    first, *waiting = delayed_inserts(frames, buf, offsets, lengths, types)
    assert taken == len(frames) and len(waiting) == 2
    done = {bytes(buf[at:at + 16]): k for k, at in enumerate(rows[SNAPSHOT::BASE_JOB])}
    assert len(done) == 5 and ids[first] in done
    k = done[ids[first]]
    assert rows[k * BASE_JOB + REVISION] == 5
    assert links[k * _pure_tail.TAIL_LINK + _pure_tail.AVAILABILITY_LENGTH] > 0
    assert not {i for i in range(len(frames)) if ids[i] == ids[first]} & set(pending[::4])
    assert totals[2] == 1
    assert all(pending[j + 3] == (pending[j] > first) for j in range(0, len(pending), 4))
    states = dict(zip(live[_pure_tail.RECORD::_pure_tail.TAIL_LIVE],
                      live[_pure_tail.STATE::_pure_tail.TAIL_LIVE]))
    assert [states[i] for i in waiting] == [_pure_tail.SCHEDULED] * 2
    with tail_store(frames, batch) as root, installs_seen() as installed:
        engine, plain = both_recovered(root)
        assert installed.count("ScheduledRow") == 2
        assert len(engine.finished) == 5
        held = [engine.jobs[ids[i]] for i in waiting]
        assert all(type(entry) is LazyJobEntry for entry in held)
        assert live_timers(engine) == live_timers(plain)
        assert len(live_timers(engine)[0]) == 3  # the two waiting and the retry
        assert bookkeeping(engine) == bookkeeping(plain)
        assert answers(engine) == answers(plain)
        assert_same_jobs(engine, plain)
        assert engine.jobs[ids[first]].state.revision == 5
        assert [entry.state.state for entry in held] == ["scheduled"] * 2
        # their due time comes: both engines make the same jobs available the same way
        ticks = [one.tick(T0 + 120_000, M0 + 120_000) for one in (engine, plain)]
        assert [(n, bytes(e.raw)) for n, e in ticks[0].events] == [
            (n, bytes(e.raw)) for n, e in ticks[1].events]
        assert len(ticks[0].events) == 3
        assert bookkeeping(engine) == bookkeeping(plain)
    assert recovers_the_same_from(frames, batch) is not None
    # cut anywhere in the delayed job's life (waiting, available, executing, resulted): the
    # walk leaves it scheduled as a row, or pending (past its insert), and recovers the same
    mine = [i for i in range(len(frames)) if ids[i] == ids[first]]
    for cut in [i + 1 for i in mine]:
        assert recovers_the_same_from(frames[:cut], batch) is not None


# a queue purged: jobs waiting for a task no worker runs (at once, delayed and still
# scheduled, delayed and come due) cancelled, among nil successes; one cancelled while it
# runs (the general way), one cancelled twice (the second refused: no record)
PURGED = ([("enqueue", "z", None, {})] * 4 + [("enqueue", "z", 300, {})] * 2
          + [("enqueue", "z", 60_000, {}), ("enqueue", "a", None, {}), ("finish", 0, "nil"),
             ("advance", 400), ("enqueue", "a", None, {})]
          + [("cancel", n) for n in (0, 1, 2, 4, 5, 6, 8, 0)]
          + [("finish", 0, "nil"), ("enqueue", "z", None, {}), ("enqueue", "a", None, {}),
             ("cancel", 9)])


@pytest.mark.parametrize("batch", [1, 3, 256])
def test_jobs_cancelled_while_they_wait_are_done_in_columns(batch) -> None:
    """A job cancelled while it waits, at its insert (available or scheduled) or at its
    delayed availability, is done in columns: cancelled at the cancel's revision, no start
    nor result, its insert's stale ready or timer push not made; a job cancelled while it
    runs goes the general way. The store, and every cut of it, recovers as record by
    record (bookkeeping, answers, every JobState and timeline)."""
    frames = tail_frames(21, PURGED)
    buf, offsets, lengths, types, schemas = columns(frames)
    rows = walk_both((buf, offsets, lengths, types, schemas), 0, len(frames), 1)[2]
    states = list(rows[STATE::BASE_JOB])
    assert states.count(_pure_tail.CANCELLED) == 7 and states.count(COMPLETED) == 1
    assert {rows[k + REVISION] for k in range(0, len(rows), BASE_JOB)
            if rows[k + STATE] == _pure_tail.CANCELLED} == {2, 3}  # 3: after availability
    with tail_store(frames, batch) as root:
        engine = recovered(root)
        assert [jobs.state(k) for jobs, k in engine.finished.held()].count("cancelled") == 7
    assert recovers_the_same_from(frames, batch) is not None
    for cut in range(1, len(frames)):
        assert recovers_the_same_from(frames[:cut], batch) is not None


def test_a_delayed_job_outside_the_lifecycle_goes_the_general_way() -> None:
    """A delayed job whose retry comes due goes the general way: all its records pending,
    none held, and the store recovers as record by record. One that records a value result
    is done in columns, and so is one cancelled while it waited (cancelled at revision 2,
    no start nor result); the insert's timer push of both skipped."""
    actions = ([("enqueue", "a", 300, {}), ("enqueue", "a", 300, {}),
                ("enqueue", "a", 300, {}), ("cancel", 2), ("advance", 400),
                ("finish", 0, "failed"), ("finish", 0, "value")]
               + [("enqueue", "a", None, {}), ("finish", 0, "nil")] * 2 + [("advance", 2500)])
    frames = tail_frames(5, actions)
    buf, offsets, lengths, types, schemas = columns(frames)
    taken, _, rows, links, pending, totals, live = walk_both(
        (buf, offsets, lengths, types, schemas), 0, len(frames), 1)
    ids = owners(frames)
    delayed = {ids[i] for i in delayed_inserts(frames, buf, offsets, lengths, types)}
    assert taken == len(frames) and len(delayed) == 3 and totals[2] == 2
    done = {rows[k + STATE]: k for k in range(0, len(rows), BASE_JOB)
            if bytes(buf[rows[k + SNAPSHOT]:rows[k + SNAPSHOT] + 16]) in delayed}
    assert sorted(done) == [COMPLETED, _pure_tail.CANCELLED]
    assert rows[done[COMPLETED] + REVISION] == 5  # each step one revision on
    cancelled = done[_pure_tail.CANCELLED]
    link = cancelled // BASE_JOB * _pure_tail.TAIL_LINK
    assert (rows[cancelled + REVISION], rows[cancelled + RESULT_LENGTH],
            links[link + _pure_tail.STARTED_LENGTH],
            links[link + _pure_tail.AVAILABILITY_LENGTH]) == (2, 0, 0, 0)
    general = delayed - {bytes(buf[rows[k + SNAPSHOT]:rows[k + SNAPSHOT] + 16])
                         for k in done.values()}
    assert len(general) == 1
    assert {i for i in range(len(frames)) if ids[i] in general} <= set(pending[::4])
    assert not general & {ids[i] for i in live[_pure_tail.RECORD::_pure_tail.TAIL_LIVE]}
    assert recovers_the_same_from(frames, 256) is not None


@pytest.mark.parametrize("old", [0, -1, 0b0110])
@pytest.mark.parametrize("batch", [1, 256])
def test_a_tail_with_failures_recovers_the_same_held_in_columns(old, batch) -> None:
    """The tail of ``FAILURES`` (retryable, discarded, failed then succeeded, failed then
    cancelled), in either order or mixed, recovers the same with the columnar tail replay
    as record by record, its six successes held in columns; and so does every cut of it
    around the first failure's two records (between details and finish, or finish and
    details)."""
    frames = tail_frames(9, FAILURES)
    frames = finish_first(frames, old) if old else frames
    with tail_store(frames, batch) as root:
        assert len(recovered(root).finished) == 6
    engine = recovers_the_same_from(frames, batch)
    assert sum(job.state.failure is not None for job in all_entries(engine).values()) == 3
    first = min(i for i, (t, _, p) in enumerate(frames) if t == 30 and p[0] == 22)
    for cut in (first - 1, first, first + 1, first + 2):
        assert recovers_the_same_from(frames[:cut], batch) is not None


# worker failures of first attempts among nil successes (a worker of capacity 3, one retry,
# or none: discarded): the walk holds each failed job as a row
RETRYABLE = ([("enqueue", "a", None, {}), ("enqueue", "b", None, {"k": [1, "x"]})] * 3
             + [("finish", 0, "failed"), ("finish", 0, "nil"), ("finish", 1, "failed")]
             + [("enqueue", "a", None, {})] * 2 + [("finish", 0, "failed")])
DISCARDED = [(*action, 0) if action[0] == "enqueue" else action for action in RETRYABLE]


def held_rows_read_alike(engine, plain, held: dict) -> dict:
    """The rows of ``held`` (entries of ``engine`` not built yet), peeked; then ``engine``
    answers as ``plain`` for them and all its jobs read the same, and each row's attributes
    read as the JobState reading built. Returns the rows."""
    rows = {job_id: peek(entry) for job_id, entry in held.items()}
    assert answers(engine) == answers(plain)
    for job_id in held:
        assert job_answers(engine, job_id) == job_answers(plain, job_id)
    assert_same_jobs(engine, plain)
    for job_id, row in rows.items():
        job = held[job_id].state
        assert (row.id, row.state, row.revision, row.terminal, row.terminal_at,
                row.ready_order, row.eligible_at, row.result_present) == (
            job.id, job.state, job.revision, job.terminal, job.terminal_at,
            job.ready_order, job.eligible_at, job.result_present)
    return rows


def timers(engine) -> list:
    """The timer heap's entries (due, push counter, key), stale ones included, in order."""
    return sorted(engine._timers._heap)


def live_timers(engine) -> tuple[list, int]:
    """The timer heap's live entries, in order, and its push counter: a done delayed job
    held in columns has no entry (replay's is stale) but takes its place in the counter."""
    heap = engine._timers
    return sorted(item for item in heap._heap if engine._timer_live(item)), heap._counter


def held_in(engine, state: str) -> dict:
    """The jobs ``engine`` holds as rows not built yet, in ``state``."""
    return {job_id: entry for job_id, entry in engine.jobs.items()
            if type(entry) is LazyJobEntry and peek(entry).state == state}


def rows_held_alike(engine, plain, installed: list, kind: str, state: str,
                    count: int) -> tuple[dict, dict]:
    """``count`` jobs installed as ``kind`` rows (``installs_seen``) and still held so in
    ``state``; ``engine``'s bookkeeping and live timer entries are ``plain``'s (recovered
    record by record), and the rows read alike (``held_rows_read_alike``). Returns the
    held entries and their rows."""
    assert installed.count(kind) == count
    held = held_in(engine, state)
    assert len(held) == count
    assert bookkeeping(engine) == bookkeeping(plain)
    assert live_timers(engine) == live_timers(plain)
    return held, held_rows_read_alike(engine, plain, held)


def retries_come_due_alike(engine, plain) -> int:
    """A tick a minute on makes the same jobs available the same way in both engines;
    returns how many events it wrote."""
    ticks = [one.tick(T0 + 60_000, M0 + 60_000) for one in (engine, plain)]
    assert [(n, bytes(e.raw)) for n, e in ticks[0].events] == [
        (n, bytes(e.raw)) for n, e in ticks[1].events]
    return len(ticks[0].events)


def recovers_the_same_once_due(frames: list, batch: int, failed_rows: int) -> None:
    """``frames``, where retries came due (a retry the walk does not follow goes the general
    way), recovers as record by record with ``failed_rows`` jobs held as ``FailedRow``s."""
    with tail_store(frames, batch) as root, installs_seen() as installed:
        both_recovered(root)
        assert installed.count("FailedRow") == failed_rows
    assert recovers_the_same_from(frames, batch) is not None


@pytest.mark.parametrize("state", ["retryable", "discarded"])
@pytest.mark.parametrize("old", [0, -1, 0b010])
@pytest.mark.parametrize("batch", [1, 256])
def test_failed_jobs_are_held_as_rows_as_replay_leaves_them(state, old, batch) -> None:
    """Jobs a worker failure of their first attempt left retryable (or discarded, with no
    retry) are held as their rows (``FailedRow``) with what their four records give them,
    details first (the engine) or finish first (older stores) or mixed: counted in their
    state, the finish's stamp, the definition's charge and the details' margin, the failed
    attempt in the timeline, no ready key, and the same timer entries pushed in the same
    order as the record-by-record replay (none when discarded); reading one builds its
    JobState; the retries come due alike."""
    frames = tail_frames(11, RETRYABLE if state == "retryable" else DISCARDED)
    frames = finish_first(frames, old) if old else frames
    with tail_store(frames, batch) as root, installs_seen() as installed:
        engine, plain = both_recovered(root)
        assert installed.count("FailedRow") == 3
        held = held_in(engine, state)
        assert len(held) == 3
        assert bookkeeping(engine) == bookkeeping(plain)
        assert timers(engine) == timers(plain)
        assert all(type(entry) is LazyJobEntry for entry in held.values())  # still rows
        held_rows_read_alike(engine, plain, held)
        assert all(type(entry) is JobEntry for entry in held.values())
        assert all(entry.state.failure == {"type": "E", "message": "no"}
                   for entry in held.values())
        assert retries_come_due_alike(engine, plain) == (3 if state == "retryable" else 0)
        assert bookkeeping(engine) == bookkeeping(plain)


def delayed_failures(retries: int, due: bool = False) -> list:
    """Delayed jobs (a worker of capacity 3) whose first attempt fails, left retryable
    (``retries`` 1) or discarded (0), among nil successes of delayed and plain jobs; then,
    with ``due``, the retries come due and one succeeds (the general way)."""
    delayed = ("enqueue", "a", 300, {}, retries)
    return ([delayed, delayed, ("enqueue", "a", None, {})] + [("advance", 400)]
            + [("finish", 0, "failed"), ("finish", 0, "nil"), ("finish", 0, "failed")]
            + [delayed] * 2 + [("advance", 400), ("finish", 0, "failed"),
                               ("finish", 0, "nil")]
            + ([("advance", 2500), ("finish", 0, "nil")] if due else []))


@pytest.mark.parametrize("retries", [1, 0])
@pytest.mark.parametrize("old", [0, -1, 0b010])
@pytest.mark.parametrize("batch", [1, 256])
def test_delayed_failed_jobs_are_held_as_rows_as_replay_leaves_them(retries, old,
                                                                       batch) -> None:
    """A delayed job a worker failure of its first attempt left retryable or discarded is
    held as its row (``FailedRow``, revision 5: insert, availability, start, the
    finish and its details, either way round): counted in its state, the finish's stamp,
    the details' margin, the failed attempt in the timeline, the live timer entries replay
    leaves (its insert's stale one skipped in the tiebreak); reading one builds its
    JobState. A delayed job's retry goes the general way, and every prefix of the tail
    recovers as record by record."""
    frames = tail_frames(13, delayed_failures(retries))
    frames = finish_first(frames, old) if old else frames
    state = "retryable" if retries else "discarded"
    with tail_store(frames, batch) as root, installs_seen() as installed:
        engine, plain = both_recovered(root)
        held, rows = rows_held_alike(engine, plain, installed, "FailedRow", state, 3)
        for job_id in rows:
            job = held[job_id].state
            assert (job.revision, job.attempt, job.failure) == (
                5, 1, {"type": "E", "message": "no"})
        assert retries_come_due_alike(engine, plain) == (3 if retries else 0)
    ids = owners(frames)
    first = next(iter(rows))
    for cut in [i + 1 for i in range(len(frames)) if ids[i] == first]:
        assert recovers_the_same_from(frames[:cut], batch) is not None
    assert recovers_the_same_from(frames, batch) is not None
    recovers_the_same_once_due(tail_frames(13, delayed_failures(retries, due=True)), batch,
                               0 if retries else 3)


def timeouts(retries: int, due: bool = False) -> list:
    """A job and a delayed job (a worker of capacity 3) whose first attempt the engine
    times out (500 ms), left retryable (``retries`` 1) or discarded (0), beside a nil
    success; then, with ``due``, their retries come due (the general way)."""
    return ([("enqueue", "a", None, {}), ("finish", 0, "nil"),
             ("enqueue", "a", None, {}, retries, 500), ("enqueue", "a", 300, {}, retries, 500),
             ("advance", 400), ("advance", 1000)] + ([("advance", 2500)] if due else []))


@pytest.mark.parametrize("retries", [1, 0])
@pytest.mark.parametrize("batch", [1, 256])
def test_timed_out_jobs_are_held_as_rows_as_replay_leaves_them(retries, batch) -> None:
    """A job whose first attempt the engine timed out (its finish: outcome timed out, a
    timeout diagnostic, no details) is held as its row, retryable or discarded at revision
    3 (4 when delayed: its availability among its records): counted in its state, the
    finish's stamp, no margin, the timed-out attempt in the timeline, the live timer
    entries replay leaves; reading one builds its JobState. Its retry goes the general
    way, and every prefix recovers as record by record."""
    frames = tail_frames(15, timeouts(retries))
    state = "retryable" if retries else "discarded"
    with tail_store(frames, batch) as root, installs_seen() as installed:
        engine, plain = both_recovered(root)
        held = held_in(engine, state)
        assert sorted(peek(entry).revision for entry in held.values()) == [3, 4]
        assert [entry.attempts[0][3] for entry in held.values()] == [
            "timed_out" if retries else "discarded"] * 2
        held, rows = rows_held_alike(engine, plain, installed, "FailedRow", state, 2)
        for job_id in rows:
            job = held[job_id].state
            assert (job.failure, job.diagnostic["code"]) == (None, 5)
        assert retries_come_due_alike(engine, plain) == (2 if retries else 0)
    for cut in range(1, len(frames)):
        assert recovers_the_same_from(frames[:cut], batch) is not None
    assert recovers_the_same_from(frames, batch) is not None
    recovers_the_same_once_due(tail_frames(15, timeouts(retries, due=True)), batch,
                               0 if retries else 2)


# jobs whose first attempt fails and whose retry succeeds (a worker of capacity 3), among
# nil successes, one retry failing again; then jobs left waiting
RETRIED = ([("enqueue", "a", None, {})] * 3
           + [("finish", 0, "failed"), ("finish", 0, "nil"), ("finish", 0, "failed")]
           + [("enqueue", "a", None, {})] * 2 + [("advance", 2500)]
           + [("finish", 0, "nil")] * 4 + [("enqueue", "a", None, {}), ("finish", 0, "failed"),
                                           ("advance", 2500), ("finish", 0, "failed")]
           + [("enqueue", "a", None, {})] * 2)


@pytest.mark.parametrize("old", [0, -1, 0b0110])
@pytest.mark.parametrize("batch", [1, 256])
def test_a_retried_success_is_held_as_a_completed_row(old, batch) -> None:
    """A job whose first attempt a worker failure left retryable and whose retry then
    succeeded is held as its row (``RetriedRow``, completed at revision 8) in its last
    record's place, its eight records not replayed: counted completed, the success's stamp,
    the definition's charge and the margin of its details and nil result, both attempts in
    the timeline, no timer entry and the failure's stale pushes skipped in the tiebreak. It
    recovers as record by record in either order of details and finish, result and finish;
    a retry that fails again goes the general way."""
    frames = tail_frames(17, RETRIED)
    frames = finish_first(frames, old) if old else frames
    with tail_store(frames, batch) as root, installs_seen() as installed:
        engine, plain = both_recovered(root)
        held, rows = rows_held_alike(engine, plain, installed, "RetriedRow", "completed", 2)
        for job_id in rows:
            job = held[job_id].state
            assert (job.revision, job.attempt, job.failure) == (
                8, 2, {"type": "E", "message": "no"})
            assert [attempt[3] for attempt in held[job_id].attempts] == ["failed", "completed"]
    assert recovers_the_same_from(frames, batch) is not None
    ids = owners(frames)
    first = next(iter(rows))
    for cut in [i + 1 for i in range(len(frames)) if ids[i] == first]:
        assert recovers_the_same_from(frames[:cut], batch) is not None


@pytest.mark.parametrize("field,value", [("due", 999), ("due", 1251), ("token", 3),
                                         ("details", 1), ("max_attempts", 2)])
def test_a_failure_the_reducer_refuses_is_not_held(field, value) -> None:
    """A worker failure's finish with its retry due outside the first window (1,000 to
    1,250 ms after it), another execution's token, or details at a revision the job does
    not have, or a discarding finish of a job with a retry left: the walk holds no row for
    that job (the other two are held), and the store is refused as the record-by-record
    replay refuses it."""
    frames = tail_frames(11, DISCARDED if field == "max_attempts" else RETRYABLE)
    buf, offsets, lengths, types, schemas = columns(frames)
    finish = min(i for i in range(len(frames)) if types[i] == 8 and frames[i][2][16] == 4
                 and _pure_tail._mutation(buf, offsets[i] + FRAME_HEADER, lengths[i],
                                          LIMITS_)[er.C] == 1)
    row = _pure_tail._mutation(buf, offsets[finish] + FRAME_HEADER, lengths[finish], LIMITS_)
    rtype, schema, payload = frames[finish]
    if field == "max_attempts":  # the job's insert: a retry left for it
        insert = next(i for i in range(finish) if frames[i][2][:17] == payload[:16] + b"\x01")
        key = b"max_attempts\x04" + (1).to_bytes(8, "big")
        assert frames[insert][2].count(key) == 1
        frames[insert] = (8, 1, frames[insert][2].replace(
            key, key[:-8] + value.to_bytes(8, "big")))
    elif field == "details":  # the details before this finish: claim the revision after it
        details = finish - 1
        assert frames[details][2][:2] == b"\x16\x02"
        event = decode_epoch_event(frames[details][2]).event
        frames[details] = (30, 2, encode_epoch_event(failure_recorded(
            event["job_id"], event["at"], 2 + value, event["error"]), 3 + value))
    else:
        key = b"next_due_at\x04" if field == "due" else b"execution_token\x04"
        old = key + (row[er.F] if field == "due" else row[er.A]).to_bytes(8, "big")
        new = key + (row[er.AT] + value if field == "due" else value).to_bytes(8, "big")
        assert payload.count(old) == 1
        frames[finish] = (rtype, schema, payload.replace(old, new))
    walked = walk_both(columns(frames), 0, len(frames), 1)
    live = walked[6]
    assert len([state for state in live[_pure_tail.STATE::_pure_tail.TAIL_LIVE]
                if state in (_pure_tail.RETRYABLE, _pure_tail.DISCARDED)]) == 2
    assert recovers_the_same_from(frames, 256) is None


def test_details_apart_from_their_finish_are_not_held() -> None:
    """Finish first (older stores), with the first failure's details moved past the next
    failure's finish: the walk holds the first failure's job only when its details come
    right after its finish (its row pushes both timer entries where the details are, and
    replay pushed the first where the finish is, before the other job's), so it is left to
    the exact replay, and the store recovers the same, timers included."""
    frames = finish_first(tail_frames(11, RETRYABLE))
    ids = owners(frames)
    finishes = [i for i, (t, _, p) in enumerate(frames) if t == 8 and p[16] == 4
                and i + 1 < len(frames) and frames[i + 1][2][:2] == b"\x16\x02"]
    first, second = finishes[:2]
    assert ids[first] != ids[second] and first + 1 < second
    frames.insert(second + 1, frames.pop(first + 1))
    walked = walk_both(columns(frames), 0, len(frames), 1)
    live = walked[6]
    assert list(live[_pure_tail.STATE::_pure_tail.TAIL_LIVE]).count(_pure_tail.RETRYABLE) == 2
    for batch in (1, 256):
        assert recovers_the_same_from(frames, batch) is not None


def test_a_retryable_row_is_built_from_its_records_when_its_retry_comes_due() -> None:
    """Held retryable rows stay rows until read: the recovery's timer heap does not build
    them (its liveness check reads the row), and the retry's tick builds each one."""
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        rewrite_tail(root, finish_first(tail_frames(11, RETRYABLE), 0b001))
        with not_activated():  # the activation's interrupted jobs come due first
            engine = recovered(root)
        held = [entry for entry in engine.jobs.values() if type(entry) is LazyJobEntry
                and peek(entry).state == "retryable"]
        assert len(held) == 3
        assert engine._timers.peek_due() == min(peek(entry).eligible_at for entry in held)
        engine._timers._sweep()
        assert all(type(entry) is LazyJobEntry for entry in held)
        engine.tick(T0 + 60_000, M0 + 60_000)
        assert all(type(entry) is JobEntry and entry.state.state == "available"
                   for entry in held)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("old", [False, True])
def test_a_long_common_tail_is_held_in_columns(old) -> None:
    actions = [("enqueue", "a", None, {})] * 5 + [("start", 0), ("finish", 0, "nil")] * 5
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        frames = tail_frames(2, actions)
        rewrite_tail(root, finish_first(frames) if old else frames)
        engine = recovered(root)
        assert len(engine.finished) == 5 and not engine.jobs
        with record_by_record():
            plain = recovered(root)
        assert bookkeeping(plain) == bookkeeping(engine)
        captured = captured_equal_alone_and_together(engine)
        assert {type(captured.row(job)).__name__ for job in captured.jobs} == {"TailRow"}
        assert all(captured.plan_of(job) is not None for job in captured.jobs)
        assert by_id(captured.states_of(captured.jobs)) == by_id(plain.retained_jobs())
        first, second, *_ = sorted(all_entries(plain))
        for one in (plain, engine):  # expiring a held job, then reading one, as any job
            assert one.expire([first]) == 1
            one.jobs[second].state
        engine.finished.load()  # a compaction copies the held records before it reclaims
        for job_id, entry in all_entries(plain).items():
            assert engine.jobs[job_id].state == entry.state
        assert bookkeeping(engine) == bookkeeping(plain)
        assert answers(engine) == answers(plain)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_job_held_at_its_insert_is_built_when_read() -> None:
    """Jobs the walk took only the insert of are held as their rows (available, in the
    ready heap, counted and charged) and built by replaying the insert when read; a
    compaction's adoption that shifts orders builds them too; the same engine either way."""
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        rewrite_tail(root, tail_frames(3, WAITING))
        engine = recovered(root)
        with record_by_record():
            plain = recovered(root)
        held = [job_id for job_id in engine.jobs if type(engine.jobs[job_id]) is LazyJobEntry]
        assert len(held) == 2 and len(engine.finished) == 1
        assert bookkeeping(engine) == bookkeeping(plain)
        assert [peek(engine.jobs[job_id]).ready_order for job_id in held] == [
            plain.jobs[job_id].state.ready_order for job_id in held]
        assert answers(engine) == answers(plain)
        for one in (engine, plain):
            one.adopt_compaction([], 1, 1, one.next_sequence)
        assert type(engine.jobs[held[0]]) is JobEntry
        assert_same_jobs(engine, plain)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_walk_with_no_done_job_still_holds_its_waiting_jobs() -> None:
    """A tail cut before any job finished: the walk takes the inserts and starts, the
    waiting jobs are held as rows and the started ones built from their two records in one
    batch; the recovery's activation interrupts the started ones."""
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        rewrite_tail(root, tail_frames(6, WAITING[:-1]))
        engine = recovered(root)
        with record_by_record():
            plain = recovered(root)
        assert len(engine.finished) == 0
        assert sum(type(entry) is LazyJobEntry for entry in engine.jobs.values()) == 3
        assert sorted(peek(entry).state for entry in engine.jobs.values()) == \
            ["available"] * 3 + ["retryable"] * 3
        assert bookkeeping(engine) == bookkeeping(plain)
        assert answers(engine) == answers(plain)
        assert_same_jobs(engine, plain)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_jobs_left_executing_are_installed_from_the_walk_as_replay_leaves_them() -> None:
    """The jobs a tail left executing at their start come from the walk (``ExecutingRow``,
    built in a batch) with the bookkeeping replay gives them: counted executing and as
    durable executions, the start's stamp, no ready key, the attempt's start in the
    timeline; the same engine as the record-by-record replay before the activation."""
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        rewrite_tail(root, tail_frames(7, WAITING[:-1] + [("advance", 1)]))
        with installs_seen() as installed:
            engine, plain = both_recovered(root)
        assert sorted(installed) == ["ExecutingRow"] * 3 + ["LiveRow"] * 3
        assert engine.durable_executing == plain.durable_executing == 3
        assert bookkeeping(engine) == bookkeeping(plain)
        assert answers(engine) == answers(plain)
        assert_same_jobs(engine, plain)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("first", ["value", "cancelled"])
def test_a_walk_that_inserts_a_held_id_is_left_to_the_exact_replay(first) -> None:
    """The first walk stops at an insert of the first job's id (a walk's own table knows
    it): the first job is then held by the engine, done in columns (a value result, or
    cancelled while it waited), when the next walk takes the job inserted under its id:
    nothing is installed, and the record-by-record replay refuses that insert."""
    actions = ([("enqueue", "a", None, {}), ("finish", 0, "value")] if first == "value"
               else [("enqueue", "z", None, {}), ("cancel", 0)]) \
        + [("enqueue", "a", None, {}), ("finish", 0, "nil")]
    frames = damaged(tail_frames(4, actions), (5, 0))
    calls: list = []
    install = EpochEngine.epoch_install_tail
    root = scratch_path("tail-columns")
    saved = store_v2._BATCH
    try:
        empty_store(root)
        rewrite_tail(root, frames)
        store_v2._BATCH = 1
        with record_by_record():
            plain = outcome(root)
        EpochEngine.epoch_install_tail = lambda self, jobs, inserted: calls.append(
            install(self, jobs, inserted)) or calls[-1]
        assert outcome(root) == plain
        assert plain[:2] == ("consumer_rejected", "job_already_exists")
        # the first walk takes the first job's records and installs its run holding the
        # job ((stamp, ready counter) 0, 0); a later walk takes the job inserted under its
        # id and installs nothing (None)
        assert calls == [(0, 0), None], calls
    finally:
        EpochEngine.epoch_install_tail = install
        store_v2._BATCH = saved
        shutil.rmtree(root, ignore_errors=True)


def test_held_tail_jobs_read_their_records_from_the_segment_checked() -> None:
    """A held tail job's records are read back from the tail segment, checked as a base
    run's are: bytes that changed since replay refuse the read (and a compaction's copy)."""
    actions = [("enqueue", "a", None, {})] * 3 + [("start", 0), ("finish", 0, "nil")] * 3
    root = scratch_path("tail-columns")
    try:
        empty_store(root)
        path = rewrite_tail(root, tail_frames(5, actions))
        engine = recovered(root)
        assert len(engine.finished) == 3
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(BaseReadFailed):
            engine.finished.load()
        failed = 0
        for job_id in list(engine.finished.stamps):
            try:
                engine.jobs[job_id].state
            except BaseReadFailed:
                failed += 1
        assert failed == 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_tail_of_general_jobs_is_walked_once(monkeypatch) -> None:
    """A tail whose every job leaves the common lifecycle (its retry fails again) holds
    nothing: the records its walk took go the record-by-record way (nothing is installed;
    the run's pending replay cost ~10 % more per record), the segment is walked once, not
    again after each record-by-record batch (which made such a tail quadratic: 3x slower
    than record by record at 10,000 jobs), and it recovers the same."""
    actions = [action for n in range(60) for action in (
        ("enqueue", "a", None, {}), ("finish", 0, "failed"), ("advance", 2500),
        ("finish", 0, "failed"))]
    frames = tail_frames(6, actions)
    walks: list = []
    walk = _native.tail_jobs
    monkeypatch.setattr(_native, "tail_jobs", lambda *args: walks.append(args[5]) or walk(*args))
    installs: list = []
    install = EpochEngine.epoch_install_tail
    monkeypatch.setattr(EpochEngine, "epoch_install_tail",
                        lambda self, *args: installs.append(args) or install(self, *args))
    assert recovers_the_same_from(frames, 8) is not None
    assert walks == [0]  # one walk, from the tail's first record (and none record by record)
    assert installs == []


def test_retried_successes_with_value_results_recover_the_same_held_as_rows() -> None:
    """A retried success whose result is a value (not nil) is held as its completed row
    too, its margin the details' charge and the result's canonical size, as record by
    record."""
    actions = [("enqueue", "a", None, {}), ("finish", 0, "failed")] * 3 \
        + [("advance", 2500)] + [("finish", 0, "value"), ("finish", 0, "nil"),
                                 ("finish", 0, "value")]
    frames = tail_frames(7, actions)
    buf, offsets, lengths, types, schemas = columns(frames)
    live = walk_both((buf, offsets, lengths, types, schemas), 0, len(frames), 1)[6]
    assert list(live[_pure_tail.STATE::_pure_tail.TAIL_LIVE]) == [_pure_tail.COMPLETED] * 3
    assert recovers_the_same_from(frames, 256) is not None

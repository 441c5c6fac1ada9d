"""Live job rows (tay._native.LiveTable, csrc/live_rows.c): the C table equals its pure twin,
and both equal the Python reducer (EpochReducer.mutation over transitions.apply).

The mutation streams are the (8,1) records of tails a Store-v2 engine wrote for random
commands (test_tail_columns' generator: enqueues with and without delay, starts, successes,
failures, cancels, ticks), damaged or not. A row the table refuses is either one the reducer
refuses too (then both go on without it) or one the table does not hold (a slow row, a
failure finish, a retry): there the comparison stops, as the caller takes that job the
general way.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tay import _native
from tay._native import _pure_events as er
from tay._native import _pure_live as lv
from tay._native import _pure_mutations as mr
from tay.failures import TayFailure
from tay.storage.events.transitions import STATES
from tay.storage.v2.epoch_records import decode_epoch_event
from tay.storage.v2.records import decode_mutation
from tay.storage.v2.reducer import EpochReducer
from tests.engine.test_tail_columns import ACTIONS, DAMAGE, LIMITS_, damaged, tail_frames

FIELDS = ("state", "revision", "attempt", "next_attempt", "cycle", "execution", "eligible_at",
          "ready_order", "inserted_at", "attempted_at", "completed_at", "terminal_at")


def as_fields(row: tuple[int, ...]) -> tuple:
    """A live row as the JobState fields it stands for (None where its NIL bit is set)."""
    values = [None if row[lv.NIL] >> slot & 1 else row[slot] for slot in range(lv.MAX_ATTEMPTS)]
    values[lv.STATE] = STATES[row[lv.STATE]]
    return (*values, row[lv.MAX_ATTEMPTS])


def job_fields(job) -> tuple:
    assert job.diagnostic is None and not job.result_present and job.failure is None
    return (*(getattr(job, name) for name in FIELDS), job.max_attempts)


def mutation_stream(frames: list) -> tuple[bytes, list[int], list[int]]:
    """The (8,1) payloads of ``frames`` back to back, their offsets and their scan rows."""
    payloads = [p for t, s, p in frames if (t, s) == (8, 1)]
    buf, offsets, at = b"".join(payloads), [], 0
    for payload in payloads:
        offsets.append(at)
        at += len(payload)
    rows = _native.mutations_scan(buf, [(o, len(p)) for o, p in zip(offsets, payloads)],
                                  *LIMITS_)
    return buf, offsets, rows


def unsupported(row: list[int]) -> bool:
    """A row the table leaves to the general path whatever the job's state."""
    return row[er.STATUS] != er.EVENT_FAST or row[mr.KIND] == 6 or (
        row[mr.KIND] == 4 and row[er.C] != 0)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), ACTIONS, DAMAGE, st.integers(1, 3))
def test_live_rows_equal_the_twin_and_the_reducer(seed, actions, damage, batch) -> None:
    buf, offsets, rows = mutation_stream(damaged(tail_frames(seed, actions), damage))
    width = mr.MUTATION_ROW
    c_table, twin = _native.LiveTable(1), lv.LiveTable(1)
    states: dict[bytes, object] = {}

    def install(state, _event) -> None:
        states[state.id] = state

    reducer = EpochReducer(states.get, install, lambda *_: None)
    reducer.end_base()
    def payload(n: int) -> bytes:
        return buf[offsets[n]:offsets[n + 1] if n + 1 < len(offsets) else len(buf)]

    k = 0
    while k < len(offsets):
        # a batch of up to `batch` rows, as a caller hands a run of them
        span = slice(k, min(len(offsets), k + batch))
        args = (buf, offsets[span], rows[span.start * width:span.stop * width])
        applied = c_table.apply(*args)
        assert applied == twin.apply(*args)
        for j in range(applied[0]):
            reducer.mutation(decode_mutation(payload(k + j)))
        for number in applied[1]:  # every job the batch changed, as the reducer left it
            job_id, row = c_table.get(number)
            assert as_fields(row) == job_fields(states[job_id])
            assert c_table.find(job_id) == number
        k += applied[0]
        if k == len(offsets) or applied[0] == span.stop - span.start:
            continue
        # row k refused: the reducer refuses it too, or the table does not hold its kind
        try:
            reducer.mutation(decode_mutation(payload(k)))
        except TayFailure:  # a decode refusal, a TransitionRejected, the allocator
            k += 1
            continue
        assert unsupported(rows[k * width:(k + 1) * width]), rows[k * width:(k + 1) * width]
        break
    assert len(c_table) == len(twin)
    assert c_table.next_order == twin.next_order
    for number in range(len(c_table)):
        assert c_table.get(number) == twin.get(number)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_row_set_retryable_follows_the_retry_as_the_reducer_does(seed) -> None:
    """The table applies no failure: the tail walk sets a row retryable once it holds a
    worker failure (``retryable``). From there both twins apply the retry's availability,
    start and success as the reducer does, row for row."""
    frames = tail_frames(seed, [("enqueue", "a", None, {}), ("finish", 0, "failed"),
                                ("advance", 2500), ("finish", 0, "nil")])
    buf, offsets, rows = mutation_stream(frames)
    assert [rows[k * mr.MUTATION_ROW + mr.KIND] for k in range(len(offsets))] == [
        1, 3, 4, 2, 3, 4]
    states: dict[bytes, object] = {}
    reducer = EpochReducer(states.get, lambda state, _: states.__setitem__(state.id, state),
                           lambda *_: None)
    reducer.end_base()
    for rtype, _, payload in frames:  # the details (30,2) at revision 3, before the finish
        if rtype == 8:
            reducer.mutation(decode_mutation(payload))
        else:
            reducer.event(decode_epoch_event(payload))
    width = mr.MUTATION_ROW
    for table in (_native.LiveTable(1), lv.LiveTable(1)):
        assert table.apply(buf, offsets[:2], rows[:2 * width]) == (2, [0, 0])
        assert table.apply(buf, offsets[2:3], rows[2 * width:3 * width]) == (0, [])  # a failure
        due = rows[2 * width + er.F]
        table.retryable(0, 4, 2, due)  # at the finish's revision, after the details
        assert table.apply(buf, offsets[3:5], rows[3 * width:5 * width]) == (2, [0, 0])
        # the success's finish comes after its result (revision 7): the table knows no
        # results, so the walk applies it as the finish of the start's revision
        finish = list(rows[5 * width:])
        finish[er.EXPECTED] -= 1
        assert table.apply(buf, offsets[5:], finish) == (1, [0])
        job_id, row = table.get(0)
        job = states[job_id]
        fields = list(as_fields(row)[:len(FIELDS)])
        fields[lv.REVISION] += 1
        assert fields == [getattr(job, name) for name in FIELDS]
        assert (job.state, job.attempt, job.revision) == ("completed", 2, 8)
        with pytest.raises(IndexError):
            table.retryable(1, 4, 2, due)


def test_bad_input_is_refused_clearly() -> None:
    for table in (_native.LiveTable(), lv.LiveTable()):
        with pytest.raises(ValueError, match="row integers"):
            table.apply(bytes(64), [0], [0] * 3)
        with pytest.raises(ValueError, match="outside the buffer"):
            table.apply(bytes(20), [8], [0] * mr.MUTATION_ROW)
        with pytest.raises(IndexError):
            table.get(0)
        with pytest.raises(ValueError):
            type(table)(-1)
        assert table.apply(bytes(20), [], []) == (0, [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), ACTIONS, st.integers(0, 10**6))
def test_a_held_id_refuses_every_apply_in_both_twins(seed, actions, pick) -> None:
    """An id held before its job's records (the tail walk's job inserted before its range):
    every mutation of that job is refused, its insert included, alike in C and the twin;
    the other jobs' apply as before, and the held row reads the same in both."""
    buf, offsets, rows = mutation_stream(tail_frames(seed, actions))
    if not offsets:
        return
    width = mr.MUTATION_ROW
    held = bytes(buf[offsets[pick % len(offsets)]:offsets[pick % len(offsets)] + 16])
    tables = (_native.LiveTable(1), lv.LiveTable(1))
    assert [table.hold(held) for table in tables] == [0, 0]
    assert [table.hold(held) for table in tables] == [None, None]  # held already
    for k, offset in enumerate(offsets):
        job_id = bytes(buf[offset:offset + 16])
        row = rows[k * width:(k + 1) * width]
        applied = [table.apply(buf, [offset], row) for table in tables]
        assert applied[0] == applied[1]
        if job_id == held:
            assert applied[0] == (0, [])
        elif applied[0] == (0, []):
            # the rest as a table without the held id: refusing stops its job for good
            # here, so the rest of the stream is not compared
            break
    assert tables[0].get(0) == tables[1].get(0)
    assert tables[0].get(0)[1][lv.STATE] == lv.HELD == lib_held()
    assert tables[0].next_order == tables[1].next_order


def lib_held() -> int:
    from tay._native.c import lib

    return lib.TAY_LIVE_HELD


def test_the_twins_share_the_row_layout() -> None:
    from tay._native import checks
    from tay._native.c import lib

    assert checks.MUTATION_ROW == mr.MUTATION_ROW == lib.TAY_MUTATION_ROW
    assert lv.LIVE_ROW == lib.TAY_LIVE_ROW
    assert [lv.STATE, lv.REVISION, lv.MAX_ATTEMPTS, lv.NIL] == [
        lib.TAY_LR_STATE, lib.TAY_LR_REVISION, lib.TAY_LR_MAX_ATTEMPTS, lib.TAY_LR_NIL]

"""The shared transition function: the E1..E6 oracle, every guard, retry arithmetic, replay."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.storage import events as ev
from tay.storage.formats import record
from tay.storage.events.definition import PayloadRefused, build_definition
from tay.storage.events.transitions import (
    JobState, JobTable, TransitionRejected, apply, expected_finish, retry_due_range,
    retry_window,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
EVENT_V1 = FIXTURES / "upstream" / "events" / "v1"
OUR_V2 = FIXTURES / "tay" / "events" / "v2"
JOB = bytes(15) + b"\x01"
REPLAY_ORDER = ["E1", "E2", "E3", "E4", "E6", "E5"]


def literal(path: Path) -> bytes:
    return bytes.fromhex("".join(path.read_text(encoding="ascii").split()))


def fixture_event(name: str) -> tuple[int, ev.Event]:
    rec = record.decode_record(literal(EVENT_V1 / f"{name}.hex"))
    return rec.sequence, ev.decode_event(rec.type, rec.schema, rec.payload)


def replay(events: list[tuple[int, ev.Event]]) -> JobState:
    state = None
    for sequence, event in events:
        state = apply(state, sequence, event)
    assert state is not None
    return state


def rejected(previous, sequence, event) -> TransitionRejected:
    with pytest.raises(TransitionRejected) as caught:
        apply(previous, sequence, event)
    failure = caught.value
    assert failure.kind == "consumer_rejected" and failure.sequence == sequence
    return failure


# ---- the E1..E6 oracle -----------------------------------------------------------------

EXPECTED_STEPS = {
    "E1": dict(state="scheduled", revision=1, attempt=0, next_attempt=1, cycle=1,
               eligible_at=10, ready_order=None, execution=None),
    "E2": dict(state="available", revision=2, eligible_at=10, ready_order=2),
    "E3": dict(state="executing", revision=3, attempt=1, execution=3, attempted_at=10,
               eligible_at=None, ready_order=None),
    "E4": dict(state="retryable", revision=4, attempt=1, next_attempt=2, eligible_at=1011,
               execution=None, diagnostic={"code": 1, "version": 1}, terminal_at=None),
    "E6": dict(state="available", revision=5, eligible_at=12, ready_order=5, next_attempt=2),
    "E5": dict(state="cancelled", revision=6, next_attempt=None, eligible_at=None,
               ready_order=None, terminal_at=13, completed_at=None),
}


def test_e1_to_e6_replay_in_sequence_order_passes_every_documented_state() -> None:
    state = None
    for name in REPLAY_ORDER:
        sequence, event = fixture_event(name)
        state = apply(state, sequence, event)
        for field, expected in EXPECTED_STEPS[name].items():
            assert getattr(state, field) == expected, (name, field)
    assert state.inserted_at == 0 and state.id == JOB


def test_every_other_order_or_duplicate_of_the_lifecycle_is_refused() -> None:
    events = {name: fixture_event(name) for name in REPLAY_ORDER}
    good = tuple(REPLAY_ORDER)
    for order in itertools.permutations(REPLAY_ORDER):
        if order == good:
            continue
        with pytest.raises(TransitionRejected):
            replay([events[name] for name in order])
    for index, name in enumerate(REPLAY_ORDER):  # any event applied twice
        with pytest.raises(TransitionRejected):
            replay([events[n] for n in REPLAY_ORDER[: index + 1]] + [events[name]])


def test_fixture_sequences_are_what_the_oracle_says() -> None:
    assert [fixture_event(n)[0] for n in REPLAY_ORDER] == [1, 2, 3, 4, 5, 6]


# ---- our (10,2) fixtures through the table ---------------------------------------------

@pytest.mark.parametrize("name, result", [
    ("result_null.hex", None),
    ("result_nested.hex", {"count": 3, "items": [1.5, "two", None, True, -4],
                           "meta": {"empty": {}, "list": []}}),
])
def test_result_fixture_replays_to_a_completed_job_with_its_result(name, result) -> None:
    table = JobTable()
    for rec in record.decode_stream(literal(OUR_V2 / name)):
        job = table.apply(rec.sequence, ev.decode_event(rec.type, rec.schema, rec.payload))
    assert job.state == "completed" and job.revision == 4 and job.completed_at == 102
    assert job.result_present and job.result == result
    assert table.counts()["completed"] == 1 and table.last_sequence == 4


# ---- guards, one test per error path ----------------------------------------------------

DEFINITION = build_definition(worker_key="w", queue_key="q", max_attempts=2)


def inserted(at: int = 0) -> JobState:
    return apply(None, 1, ev.job_inserted(JOB, at, DEFINITION))


def executing(attempt: int = 1) -> JobState:
    job = apply(inserted(), 2, ev.job_started(JOB, 5, 1, 1, 1))
    if attempt == 2:
        job = apply(job, 3, failed(job, 6, 1006))
        job = apply(job, 4, ev.job_retried(JOB, 7, 3, 0))
        job = apply(job, 5, ev.job_started(JOB, 8, 4, 2, 1))
    return job


def failed(job: JobState, at: int, due: int | None, outcome: int = ev.WORKER_FAILURE) -> ev.Event:
    disposition, next_attempt = expected_finish(outcome, job.attempt, job.max_attempts)
    code = {ev.WORKER_FAILURE: 1, ev.TIMEOUT: 5, ev.INTERRUPTED: 7}[outcome]
    return ev.job_finished(JOB, at, job.revision, execution_token=job.execution,
                           outcome=outcome, diagnostic_code=code, disposition=disposition,
                           next_attempt=next_attempt, next_due_at=due)


def succeeded(job: JobState, at: int = 9) -> ev.Event:
    return ev.job_finished(JOB, at, job.revision, execution_token=job.execution, outcome=0,
                           diagnostic_code=None, disposition=0)


def test_insert_twice_is_job_already_exists() -> None:
    failure = rejected(inserted(), 2, ev.job_inserted(JOB, 0, DEFINITION))
    assert failure.guard == "job_already_exists"


def test_event_for_missing_job_is_job_absent() -> None:
    assert rejected(None, 2, ev.job_started(JOB, 5, 1, 1, 1)).guard == "job_absent"


def test_event_for_other_job_is_job_id_mismatch() -> None:
    other = bytes(15) + b"\x09"
    assert rejected(inserted(), 2, ev.job_started(other, 5, 1, 1, 1)).guard == "job_id_mismatch"


def test_stale_expected_revision_is_revision_mismatch() -> None:
    job = executing()
    stale = ev.job_finished(JOB, 9, 1, execution_token=2, outcome=0, diagnostic_code=None,
                            disposition=0)
    failure = rejected(job, 3, stale)
    assert failure.guard == "revision_mismatch" and failure.job_id == JOB
    assert "expected_revision 1, job revision 2" in str(failure) and JOB.hex() in str(failure)


def test_sequence_not_above_expected_revision_is_refused() -> None:
    job = inserted()
    failure = rejected(job, 1, ev.job_started(JOB, 5, 1, 1, 1))
    assert failure.guard == "expected_revision_not_below_sequence"


def test_non_job_event_is_refused() -> None:
    schedule_like = ev.Event(7, 2, "schedule_registered", {"at": 0, "expected_revision": 0})
    assert rejected(None, 1, schedule_like).guard == "not_a_job_event"


def test_available_from_available_is_wrong_state() -> None:
    job = inserted(at=0)  # unscheduled: available at once
    assert job.state == "available" and job.ready_order == 1
    assert rejected(job, 2, ev.job_available(JOB, 0, 1, 0)).guard == "available_from_wrong_state"


def test_available_with_other_due_at_is_due_at_mismatch() -> None:
    job = apply(None, 1, ev.job_inserted(JOB, 0, dict(DEFINITION, scheduled_at=10)))
    assert rejected(job, 2, ev.job_available(JOB, 11, 1, 11)).guard == "due_at_mismatch"


def test_available_from_retryable_uses_the_retry_due_time() -> None:
    job = executing()
    job = apply(job, 3, failed(job, 6, 1006))
    job = apply(job, 4, ev.job_available(JOB, 1006, 3, 1006))
    assert (job.state, job.eligible_at, job.ready_order, job.next_attempt) == (
        "available", 1006, 4, 2)


def test_start_from_scheduled_is_wrong_state() -> None:
    job = apply(None, 1, ev.job_inserted(JOB, 0, dict(DEFINITION, scheduled_at=10)))
    assert rejected(job, 2, ev.job_started(JOB, 10, 1, 1, 1)).guard == "start_from_wrong_state"


def test_start_with_wrong_attempt_is_attempt_mismatch() -> None:
    assert rejected(inserted(), 2, ev.job_started(JOB, 5, 1, 2, 1)).guard == "attempt_mismatch"


def test_start_beyond_max_attempts_is_refused() -> None:
    job = inserted()._replace(next_attempt=3)  # max_attempts is 2
    failure = rejected(job, 2, ev.job_started(JOB, 5, 1, 3, 1))
    assert failure.guard == "attempt_exceeds_max_attempts"


def test_start_with_wrong_cycle_is_cycle_token_mismatch() -> None:
    assert rejected(inserted(), 2, ev.job_started(JOB, 5, 1, 1, 2)).guard == "cycle_token_mismatch"


def test_start_before_eligible_is_refused() -> None:
    job = apply(None, 1, ev.job_inserted(JOB, 20, dict(DEFINITION, scheduled_at=10)))
    assert rejected(job, 2, ev.job_started(JOB, 5, 1, 1, 1)).guard == "started_before_eligible"


def test_finish_when_not_executing_is_wrong_state() -> None:
    job = inserted()
    event = ev.job_finished(JOB, 5, 1, execution_token=1, outcome=0, diagnostic_code=None,
                            disposition=0)
    assert rejected(job, 2, event).guard == "finish_from_wrong_state"


def test_finish_with_old_token_is_execution_token_mismatch() -> None:
    job = executing()
    event = ev.job_finished(JOB, 9, 2, execution_token=1, outcome=0, diagnostic_code=None,
                            disposition=0)
    assert rejected(job, 3, event).guard == "execution_token_mismatch"


def test_last_attempt_failure_marked_retryable_is_disposition_mismatch() -> None:
    job = executing(attempt=2)
    event = ev.job_finished(JOB, 9, job.revision, execution_token=job.execution, outcome=1,
                            diagnostic_code=1, disposition=1, next_attempt=3, next_due_at=2009)
    assert rejected(job, 6, event).guard == "disposition_mismatch"


def test_failure_with_skipped_attempt_is_next_attempt_mismatch() -> None:
    job = executing()
    event = ev.job_finished(JOB, 9, 2, execution_token=2, outcome=1, diagnostic_code=1,
                            disposition=1, next_attempt=1, next_due_at=1009)
    assert rejected(job, 3, event).guard == "next_attempt_mismatch"


@pytest.mark.parametrize("due", [1008, 1260, 0])
def test_due_outside_the_retry_window_is_refused(due: int) -> None:
    job = executing()
    assert rejected(job, 3, failed(job, 9, due)).guard == "retry_due_outside_window"


@pytest.mark.parametrize("due", [1009, 1259])
def test_due_at_the_window_edges_is_accepted(due: int) -> None:
    job = executing()
    assert apply(job, 3, failed(job, 9, due)).eligible_at == due


def test_interrupted_keeps_the_same_attempt_even_on_the_last_one() -> None:
    job = executing(attempt=2)
    after = apply(job, 6, failed(job, 9, 2009, ev.INTERRUPTED))
    assert (after.state, after.next_attempt, after.diagnostic["code"]) == ("retryable", 2, 7)


def test_last_attempt_timeout_is_discarded_and_terminal() -> None:
    job = executing(attempt=2)
    after = apply(job, 6, failed(job, 9, None, ev.TIMEOUT))
    assert (after.state, after.next_attempt, after.terminal_at, after.eligible_at) == (
        "discarded", None, 9, None)


def test_success_completes_and_keeps_the_attempt() -> None:
    job = apply(executing(), 3, succeeded(executing()))
    assert (job.state, job.completed_at, job.terminal_at, job.attempt) == ("completed", 9, 9, 1)


def test_cancel_twice_is_wrong_state() -> None:
    job = apply(inserted(), 2, ev.job_cancelled(JOB, 1, 1, None))
    assert job.state == "cancelled" and job.terminal_at == 1
    assert rejected(job, 3, ev.job_cancelled(JOB, 2, 2, None)).guard == "cancel_from_wrong_state"


def test_cancel_of_executing_job_needs_its_token() -> None:
    job = executing()
    assert rejected(job, 3, ev.job_cancelled(JOB, 9, 2, None)).guard == "execution_token_mismatch"
    assert apply(job, 3, ev.job_cancelled(JOB, 9, 2, 2)).execution is None


def test_cancel_of_waiting_job_with_a_token_is_refused() -> None:
    failure = rejected(inserted(), 2, ev.job_cancelled(JOB, 1, 1, 1))
    assert failure.guard == "execution_token_mismatch"


def test_retry_mode_new_cycle_from_retryable_is_refused() -> None:
    job = executing()
    job = apply(job, 3, failed(job, 6, 1006))
    assert rejected(job, 4, ev.job_retried(JOB, 7, 3, 1)).guard == "retry_mode_not_allowed"


def test_retry_mode_expedite_from_discarded_is_refused() -> None:
    job = executing(attempt=2)
    job = apply(job, 6, failed(job, 9, None))
    assert rejected(job, 7, ev.job_retried(JOB, 10, 6, 0)).guard == "retry_mode_not_allowed"


def test_retry_new_cycle_resets_the_job() -> None:
    job = executing(attempt=2)
    job = apply(job, 6, failed(job, 9, None))
    job = apply(job, 7, ev.job_retried(JOB, 10, 6, 1))
    assert (job.state, job.attempt, job.next_attempt, job.cycle, job.attempted_at,
            job.eligible_at, job.ready_order, job.terminal_at) == (
        "available", 0, 1, 7, None, 10, 7, None)


def test_result_before_execution_is_refused() -> None:
    job = inserted()
    assert rejected(job, 2, ev.result_recorded(JOB, 9, 1, 1)).guard == "result_for_uncompleted_job"


def test_result_of_an_execution_is_kept_by_its_success_only() -> None:
    """The engine writes a success's result, then its finish: a store cut between them
    holds an executing job with a result, which its interrupted finish drops."""
    job = executing()
    job = apply(job, 3, ev.result_recorded(JOB, 9, 2, [1]))
    assert (job.state, job.revision, job.result_present, job.result) == (
        "executing", 3, True, [1])
    assert rejected(job, 4, ev.result_recorded(JOB, 9, 3, 2)).guard == "result_already_recorded"
    done = apply(job, 4, succeeded(job))
    assert (done.state, done.result_present, done.result) == ("completed", True, [1])
    interrupted = apply(job, 4, failed(job, 9, 1009, ev.INTERRUPTED))
    assert (interrupted.state, interrupted.result_present, interrupted.result) == (
        "retryable", False, None)
    cancelled = apply(job, 4, ev.job_cancelled(JOB, 9, 3, 2))
    assert (cancelled.state, cancelled.result_present, cancelled.result) == (
        "cancelled", False, None)


def test_second_result_is_refused() -> None:
    job = executing()
    job = apply(job, 3, succeeded(job))
    job = apply(job, 4, ev.result_recorded(JOB, 9, 3, [1]))
    assert (job.revision, job.result) == (4, [1])
    assert rejected(job, 5, ev.result_recorded(JOB, 9, 4, 2)).guard == "result_already_recorded"


# ---- retry arithmetic --------------------------------------------------------------

@pytest.mark.parametrize("attempt, window", [
    (1, (1000, 1250)), (2, (2000, 2500)), (5, (16000, 20000)), (6, (32000, 40000)),
    (7, (60000, 60000)), (100, (60000, 60000)), (65535, (60000, 60000)),
])
def test_retry_window_examples(attempt: int, window: tuple[int, int]) -> None:
    assert retry_window(attempt) == window


def test_retry_due_range_saturates_at_the_time_maximum() -> None:
    top = 2**63 - 1
    assert retry_due_range(1, top - 1100) == (top - 100, top)
    assert retry_due_range(7, top) == (top, top)


def test_retry_window_of_attempt_zero_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        retry_window(0)


def test_job_table_counts_follow_each_transition() -> None:
    table = JobTable()
    for name in REPLAY_ORDER:
        table.apply(*fixture_event(name))
        assert sum(table.counts().values()) == 1
    assert table.counts()["cancelled"] == 1 and len(table) == 1
    assert table.remove(JOB).state == "cancelled" and table.counts()["cancelled"] == 0


# ---- property: random valid histories, and mutated events never crash -------------------

@st.composite
def histories(draw) -> list[ev.Event]:
    """A random valid event history for one job, built through the builders."""
    max_attempts = draw(st.integers(1, 4))
    scheduled = draw(st.booleans())
    definition = build_definition(worker_key="w", queue_key="q", max_attempts=max_attempts,
                                  scheduled_at=50 if scheduled else None)
    now = 0
    job = None
    out: list[ev.Event] = []

    def push(event: ev.Event) -> None:
        nonlocal job
        job = apply(job, len(out) + 1, event)
        out.append(event)

    push(ev.job_inserted(JOB, now, definition))
    for _ in range(draw(st.integers(0, 12))):
        now += draw(st.integers(0, 2000))
        step = _random_step(draw, job, now)
        if step is None:
            break
        push(step)
    return out


def _random_step(draw, job: JobState, now: int) -> ev.Event | None:
    rev = job.revision
    if job.state in ("scheduled", "retryable"):
        if job.state == "retryable" and draw(st.booleans()):
            return ev.job_retried(JOB, now, rev, 0)
        if draw(st.integers(0, 5)) == 0:
            return ev.job_cancelled(JOB, now, rev, None)
        return ev.job_available(JOB, max(now, job.eligible_at), rev, job.eligible_at)
    if job.state == "available":
        if draw(st.integers(0, 5)) == 0:
            return ev.job_cancelled(JOB, now, rev, None)
        return ev.job_started(JOB, max(now, job.eligible_at), rev, job.next_attempt, job.cycle)
    if job.state == "executing":
        outcome = draw(st.sampled_from([0, 1, 2, 3, 9]))
        if outcome == 9:
            return ev.job_cancelled(JOB, now, rev, job.execution)
        disposition, next_attempt = expected_finish(outcome, job.attempt, job.max_attempts)
        low, high = retry_due_range(job.attempt, now)
        due = draw(st.integers(low, high)) if disposition == ev.RETRYABLE else None
        code = {0: None, 1: draw(st.sampled_from([1, 2, 3, 4, 6])), 2: 5, 3: 7}[outcome]
        return ev.job_finished(JOB, now, rev, execution_token=job.execution, outcome=outcome,
                               diagnostic_code=code, disposition=disposition,
                               next_attempt=next_attempt, next_due_at=due)
    if job.state == "discarded":
        return ev.job_retried(JOB, now, rev, 1)
    if job.state == "completed" and not job.result_present:
        return ev.result_recorded(JOB, now, rev, draw(st.none() | st.integers(-2**63, 2**64 - 1) | st.text()))
    return None


@settings(max_examples=100, deadline=None)
@given(histories())
def test_random_valid_history_replays_from_its_bytes(history: list[ev.Event]) -> None:
    live = None
    replayed = None
    for sequence, event in enumerate(history, start=1):
        live = apply(live, sequence, event)
        decoded = ev.decode_event(event.type, event.schema, ev.encode_event(event))
        replayed = apply(replayed, sequence, decoded)
    assert replayed == live


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**64 - 1), st.floats(),
                    st.text(max_size=4), st.binary(max_size=17))


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_mutated_field_is_refused_or_yields_a_valid_state(history, data) -> None:
    index = data.draw(st.integers(0, len(history) - 1))
    target = history[index]
    key = data.draw(st.sampled_from(sorted(target.payload)))
    payload = dict(target.payload, **{key: data.draw(SCALARS)})
    job = None
    try:
        for sequence, event in enumerate(history, start=1):
            if sequence == index + 1:
                event = ev.make_event(event.pair, payload)
            job = apply(job, sequence, event)
    except (PayloadRefused, TransitionRejected):
        return
    assert job.state in ("scheduled", "available", "executing", "retryable", "completed",
                         "cancelled", "discarded")
    assert job.revision == len(history)

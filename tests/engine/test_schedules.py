"""The schedule table with an injected clock: declaration, timing, overlap, delivery, replay.

Job states come from a plain dict (the engine's job table plays that role in production);
every event goes through its canonical bytes and ``decode_event`` before ``apply``, and the
log is replayed into a fresh table to check that replay rebuilds the same state.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.engine.schedules.timing import Timing, occurrence_job_id
from tay.engine.schedules.table import Occurrence, ScheduleTable
from tay.failures import RecoveryRefused, RequestRefused
from tay.storage.events import schedules as se
from tay.storage.events import Event, decode_event, encode_event

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000


class Harness:
    def __init__(self) -> None:
        self.table = ScheduleTable()
        self.jobs: dict[bytes, str] = {}
        self.log: list[tuple[int, int, int, bytes]] = []
        self.sequence = 0

    def lookup(self, job_id: bytes) -> str | None:
        return self.jobs.get(job_id)

    def commit(self, event: Event | None) -> None:
        if event is None:
            return
        self.sequence += 1
        raw = encode_event(event)
        self.log.append((self.sequence, event.type, event.schema, raw))
        self.table.apply(self.sequence, decode_event(event.type, event.schema, raw))

    def declare(self, now: int, **request: Any) -> str:
        request.setdefault("declaration_id", "s")
        request.setdefault("task", "t")
        schedule_id, event = self.table.declare(request, now, self.lookup)
        self.commit(event)
        return schedule_id

    def tick(self, now: int, *, admit: bool = True) -> list[Occurrence]:
        """One engine pass: admit every due occurrence (jobs start 'available')."""
        admitted = []
        for work in self.table.due_work(now, self.lookup):
            if isinstance(work, Event):
                self.commit(work)
            elif admit:
                self.jobs.setdefault(work.job_id, "available")
                self.commit(self.table.delivered(work, now, self.lookup))
                admitted.append(work)
            else:
                self.table.admission_failed(work.schedule_id, now)
        return admitted

    def replayed(self) -> ScheduleTable:
        table = ScheduleTable()
        for sequence, event_type, schema, raw in self.log:
            table.apply(sequence, decode_event(event_type, schema, raw))
        return table


def state(h: Harness, schedule_id: str = "s"):
    return h.table.get(schedule_id)


# ---- occurrence ids and timing -----------------------------------------------------------

def test_occurrence_id_vector():
    assert occurrence_job_id("stable-schedule", 1_767_225_600_000).hex() == \
        "8985a3621bcc650d18ad116ac9601745"


def _every(ms: int, catch_up: str = "latest") -> Timing:
    return Timing.of({"kind": "every", "expression": ms, "catch_up": catch_up, "timezone": None})


def test_interval_vectors_from_the_engine_tests():
    fifteen = 15 * MINUTE
    assert _every(fifteen).first_due(1_000 + 60_000) == 61_000
    assert _every(fifteen).after_delivery(61_000, 2_000_000) == 2_761_000
    assert _every(30_000, "all").after_delivery(1_000, 1_000_000) == 31_000


def test_cron_latest_coalesces_and_all_walks_each_minute():
    cron = {"kind": "cron", "expression": "* * * * *", "timezone": "+00"}
    latest = Timing.of({**cron, "catch_up": "latest"})
    walk = Timing.of({**cron, "catch_up": "all"})
    assert latest.after_delivery(T0, T0 + 10 * MINUTE + 5) == T0 + 11 * MINUTE
    assert walk.after_delivery(T0, T0 + 10 * MINUTE + 5) == T0 + MINUTE


# ---- declarations ----------------------------------------------------------------------

def test_every_fires_immediately_and_cron_includes_the_current_minute():
    h = Harness()
    h.declare(T0 + 5, declaration_id="e", every={"seconds": 30})
    h.declare(T0 + 59_000, declaration_id="c", cron="* * * * *")
    assert state(h, "e").next_at == T0 + 5
    assert state(h, "c").next_at == T0


def test_delay_and_start_at_place_the_first_occurrence():
    h = Harness()
    h.declare(1_000, declaration_id="d", every={"minutes": 15}, delay=60)
    h.declare(1_000, declaration_id="a", every={"minutes": 15}, start_at=5_000)
    assert state(h, "d").next_at == 61_000
    assert state(h, "a").next_at == 5_000


def test_same_definition_is_idempotent_and_keeps_next_at():
    h = Harness()
    h.declare(T0, every={"seconds": 30}, delay=10)
    before = state(h)
    h.declare(T0 + 1_000, every={"seconds": 30.0}, delay=99)  # 30.0 s -> the same 30,000 ms
    assert state(h) is before and len(h.log) == 1


def test_different_definition_replaces_with_a_new_revision():
    h = Harness()
    h.declare(T0, every={"seconds": 30})
    h.tick(T0)
    h.declare(T0 + 1, every={"seconds": 31})
    replaced = state(h)
    assert (replaced.revision, replaced.last_at, replaced.next_at) == (2, None, T0 + 1)


@pytest.mark.parametrize(
    "request_fields, field",
    [
        ({"every": {"seconds": 1}, "cron": "* * * * *"}, "cron"),
        ({}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "* * * * *", "timezone": "Europe/Kyiv"}, "timezone"),
        ({"every": {"seconds": 1}, "timezone": "+00"}, "timezone"),
        ({"every": {"seconds": 1, "minutes": 1}}, "every"),
        ({"every": {"weeks": 1}}, "every"),
        ({"every": {"seconds": 0}}, "every.seconds"),
        ({"every": {"seconds": True}}, "every.seconds"),
        ({"every": {"seconds": 1}, "catch_up": "some"}, "catch_up"),
        ({"every": {"seconds": 1}, "overlap": "never"}, "overlap"),
        ({"every": {"seconds": 1}, "delay": 1, "start_at": 5}, "delay"),
        ({"every": {"seconds": 1}, "delay": -1}, "delay"),
        # overflowing products are refused, not OverflowError (issue 17 item 8)
        ({"every": {"seconds": 1}, "delay": 1e308}, "delay"),
        ({"every": {"seconds": 1}, "delay": 2**63}, "delay"),
        ({"every": {"seconds": 1e308}}, "every.seconds"),
        ({"every": {"days": 1e300}}, "every.days"),
        # a cron start past the datetime calendar (found by tests/fuzz): invalid, no ValueError
        ({"cron": "* * * * *", "start_at": 2**62}, "start_at"),
        ({"cron": "* * * * *", "delay": 9e12}, "delay"),
        ({"every": {"seconds": 10**30}}, "every.seconds"),
        ({"every": {"seconds": 1}, "start_at": 1.5}, "start_at"),
        ({"every": {"seconds": 1}, "args": []}, "args"),
        ({"every": {"seconds": 1}, "options": {"id": "ab"}}, "options.id"),
        ({"every": {"seconds": 1}, "declaration_id": ""}, "declaration_id"),
        ({"every": {"seconds": 1}, "declaration_id": "x" * 129}, "declaration_id"),
        ({"every": {"seconds": 1}, "task": ""}, "task"),
        ({"every": {"seconds": 1}, "priority": 1}, "priority"),
        ({"cron": "0 0 30 2 *"}, "cron"),
    ],
)
def test_invalid_declarations_name_the_field(request_fields, field):
    h = Harness()
    with pytest.raises(RequestRefused) as info:
        h.declare(T0, **request_fields)
    assert info.value.code == "invalid_schedule"
    assert info.value.details["field"] == field
    assert h.log == []


def test_tiny_interval_is_clamped_to_one_millisecond():
    h = Harness()
    h.declare(T0, every={"seconds": 0.0001})
    assert state(h).definition["expression"] == 1


def test_options_validator_refusal_becomes_invalid_schedule():
    def engine_validator(task, args, options):
        if "retries" in options and options["retries"] > 5:
            raise RequestRefused("too many", code="invalid_enqueue", option="retries")

    table = ScheduleTable(options_validator=engine_validator)
    with pytest.raises(RequestRefused) as info:
        table.declare({"declaration_id": "s", "task": "t", "every": {"seconds": 1},
                       "options": {"retries": 9}}, T0, lambda job: None)
    assert (info.value.code, info.value.details["field"]) == ("invalid_schedule", "options.retries")


def test_generated_ids_come_from_the_injected_source():
    table = ScheduleTable(new_id=lambda: "generated-id-000000000000")
    schedule_id, event = table.declare({"task": "t", "every": {"seconds": 1}}, T0, lambda j: None)
    assert schedule_id == "generated-id-000000000000" and event["schedule_id"] == schedule_id


# ---- delivery, catch-up and overlap --------------------------------------------------------

def test_delivery_uses_the_deterministic_id_and_records_last_at():
    h = Harness()
    h.declare(T0, declaration_id="stable-schedule", every={"minutes": 1}, overlap="allow")
    (occurrence,) = h.tick(T0)
    assert occurrence.job_id.hex() == "8985a3621bcc650d18ad116ac9601745"
    after = state(h, "stable-schedule")
    assert (after.last_at, after.next_at) == (T0, T0 + MINUTE)
    assert after.active == (occurrence.job_id,)


def test_nothing_is_due_before_next_at():
    h = Harness()
    h.declare(T0, every={"minutes": 1}, delay=30)
    assert h.tick(T0 + 29_999) == []
    assert len(h.tick(T0 + 30_000)) == 1


def test_catch_up_all_delivers_missed_occurrences_serially():
    h = Harness()
    h.declare(T0, every={"minutes": 1}, catch_up="all", overlap="allow")
    now = T0 + 3 * MINUTE + 10  # e.g. the engine was down for three minutes
    dues = [occ.due_at for _ in range(5) for occ in h.tick(now)]
    assert dues == [T0, T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE]
    assert state(h).next_at == T0 + 4 * MINUTE


def test_catch_up_latest_delivers_once_then_coalesces():
    h = Harness()
    h.declare(T0, every={"minutes": 1}, overlap="allow")
    now = T0 + 3 * MINUTE + 10
    dues = [occ.due_at for _ in range(5) for occ in h.tick(now)]
    assert dues == [T0]
    assert state(h).next_at == T0 + 4 * MINUTE


def test_skip_advances_without_admitting_and_keeps_the_busy_link():
    h = Harness()
    h.declare(T0, every={"minutes": 1})  # overlap skip by default
    (first,) = h.tick(T0)
    h.jobs[first.job_id] = "executing"
    assert h.tick(T0 + 5 * MINUTE + 1) == []
    skipped = state(h)
    assert skipped.next_at == T0 + 6 * MINUTE
    assert skipped.active == (first.job_id,)
    assert skipped.last_at == T0
    h.jobs[first.job_id] = "completed"
    (second,) = h.tick(T0 + 6 * MINUTE)
    assert second.due_at == T0 + 6 * MINUTE
    assert state(h).active == (second.job_id,)


def test_queue_holds_the_same_due_occurrence_until_admission_is_possible():
    h = Harness()
    h.declare(T0, every={"minutes": 1}, overlap="queue")
    (first,) = h.tick(T0)
    h.jobs[first.job_id] = "retryable"
    events_before = len(h.log)
    assert h.tick(T0 + MINUTE) == []
    assert state(h).next_at == T0 + MINUTE and len(h.log) == events_before
    assert h.table.next_wakeup() == T0 + MINUTE + 1_000  # polls, never spins
    h.jobs[first.job_id] = "discarded"
    (second,) = h.tick(T0 + 2 * MINUTE + 1_000)
    assert second.due_at == T0 + MINUTE


def test_allow_admits_while_earlier_jobs_run():
    h = Harness()
    h.declare(T0, every={"minutes": 1}, overlap="allow")
    (first,) = h.tick(T0)
    h.jobs[first.job_id] = "executing"
    (second,) = h.tick(T0 + MINUTE)
    assert state(h).active == (first.job_id, second.job_id)


def test_tightening_allow_checks_every_active_occurrence():
    h = Harness()
    h.declare(T0, every={"minutes": 1}, overlap="allow")
    (older,) = h.tick(T0)
    (latest,) = h.tick(T0 + MINUTE)
    h.jobs[older.job_id] = "executing"
    h.jobs[latest.job_id] = "completed"  # the latest finished, an older one still runs
    h.declare(T0 + MINUTE + 1, every={"minutes": 1}, overlap="skip")
    assert state(h).active == (older.job_id,)
    assert h.tick(T0 + 2 * MINUTE) == []  # skipped because of the older run


def test_temporary_admission_failure_retries_the_same_id():
    h = Harness()
    h.declare(T0, every={"minutes": 1})
    h.tick(T0, admit=False)
    assert h.table.due_work(T0 + 999, h.lookup) == []
    (again,) = h.table.due_work(T0 + 1_000, h.lookup)
    assert again.job_id == occurrence_job_id("s", T0) and state(h).next_at == T0


def test_crash_between_admission_and_delivery_redelivers_the_same_job():
    h = Harness()
    h.declare(T0, every={"minutes": 1})
    (work,) = h.table.due_work(T0, h.lookup)
    h.jobs[work.job_id] = "executing"  # the job insert became durable, the delivery did not
    restarted = Harness()
    restarted.jobs, restarted.log, restarted.sequence = h.jobs, list(h.log), h.sequence
    restarted.table = h.replayed()
    (again,) = restarted.table.due_work(T0 + 5, restarted.lookup)
    assert again.job_id == work.job_id  # the engine finds the job and records the delivery
    restarted.commit(restarted.table.delivered(again, T0 + 5, restarted.lookup))
    assert state(restarted).active == (work.job_id,)


def test_cancellation_keeps_admitted_jobs_and_stops_delivery():
    h = Harness()
    h.declare(T0, every={"minutes": 1})
    (first,) = h.tick(T0)
    h.commit(h.table.cancel("s", T0 + 10))
    assert state(h).cancelled_at == T0 + 10 and state(h).active == (first.job_id,)
    assert h.tick(T0 + 10 * MINUTE) == [] and h.table.next_wakeup() is None
    assert h.table.cancel("s", T0 + 20) is None  # idempotent
    assert h.table.status("s")["cancelled_at"] == T0 + 10


def test_redeclaring_a_cancelled_schedule_registers_it_again():
    h = Harness()
    h.declare(T0, every={"minutes": 1})
    h.commit(h.table.cancel("s", T0 + 10))
    h.declare(T0 + 20, every={"minutes": 1})
    assert state(h).cancelled_at is None and state(h).revision == 2


# ---- legacy membership -----------------------------------------------------------------

DEFINITION = {"args": {}, "catch_up": "latest", "expression": 60_000, "kind": "every",
              "options": {}, "overlap": "allow", "task": "t", "timezone": None}


def test_legacy_allow_history_cannot_be_tightened():
    h = Harness()
    h.commit(se.legacy_registered(schedule_id="s", at=T0, definition=DEFINITION, next_at=T0,
                                  expected_revision=0))
    h.commit(se.legacy_advanced(schedule_id="s", at=T0, due_at=T0, next_at=T0 + MINUTE,
                                expected_revision=1))
    assert state(h).active == (occurrence_job_id("s", T0),)
    assert not state(h).membership_complete
    with pytest.raises(RequestRefused) as info:
        h.declare(T0 + 1, every={"minutes": 1}, overlap="skip")
    assert info.value.code == "schedule_conflict"
    h.declare(T0 + 1, every={"minutes": 2}, overlap="allow")  # still allow: fine
    assert state(h).revision == 2


def test_legacy_skip_schedule_enforces_skip_on_the_last_occurrence():
    h = Harness()
    legacy = {**DEFINITION, "overlap": "skip"}
    h.commit(se.legacy_registered(schedule_id="s", at=T0, definition=legacy, next_at=T0,
                                  expected_revision=0))
    h.commit(se.legacy_advanced(schedule_id="s", at=T0, due_at=T0, next_at=T0 + MINUTE,
                                expected_revision=1))
    h.jobs[occurrence_job_id("s", T0)] = "executing"
    assert h.tick(T0 + MINUTE) == [] and state(h).next_at == T0 + 2 * MINUTE
    h.commit(se.legacy_cancelled(schedule_id="s", at=T0 + 5, expected_revision=h.sequence))
    assert state(h).cancelled_at == T0 + 5


# ---- replay refusals -------------------------------------------------------------------

def _replay_refusal(events: list[Event]) -> RecoveryRefused:
    table = ScheduleTable()
    with pytest.raises(RecoveryRefused) as info:
        for sequence, event in enumerate(events, start=1):
            table.apply(sequence, event)
    assert info.value.kind == "consumer_rejected"
    return info.value


def _registered(**changes: Any) -> Event:
    fields = dict(action="registered", schedule_id="s", at=T0, definition=DEFINITION,
                  revision=1, expected_revision=0, next_at=T0, last_at=None,
                  cancelled_at=None, active=(), membership_complete=True)
    fields.update(changes)
    return se.schedule_state(**fields)


def _delivered(**changes: Any) -> Event:
    job = occurrence_job_id("s", T0)
    fields = dict(schedule_id="s", at=T0, due_at=T0, job_id=job, next_at=T0 + MINUTE,
                  revision=1, expected_revision=1, active=[job])
    fields.update(changes)
    return se.schedule_delivered(**fields)


def test_replay_refuses_a_delivery_of_an_unknown_schedule():
    assert _replay_refusal([_delivered()]).reason == "unknown_schedule"


def test_replay_refuses_a_wrong_expected_revision():
    assert _replay_refusal([_registered(), _delivered(expected_revision=7)]).reason == \
        "expected_revision_mismatch"


def test_replay_refuses_a_delivery_that_is_not_the_due_occurrence():
    other = occurrence_job_id("s", T0 + 5)
    refusal = _replay_refusal([_registered(), _delivered(at=T0 + 5, due_at=T0 + 5, job_id=other, active=[other])])
    assert refusal.reason == "not_the_due_occurrence"


def test_replay_refuses_membership_that_appears_from_nowhere():
    stranger = bytes(range(1, 17))
    refusal = _replay_refusal([_registered(), _delivered(active=[stranger, occurrence_job_id("s", T0)])])
    assert refusal.reason == "membership_grew"


def test_replay_refuses_a_first_registration_with_revision_two():
    assert _replay_refusal([_registered(revision=2)]).reason == "bad_first_registration"


def test_replay_refuses_an_invalid_cron_definition():
    bad = {**DEFINITION, "kind": "cron", "expression": "61 * * * *", "timezone": "+00"}
    assert _replay_refusal([_registered(definition=bad)]).reason == "invalid_definition"


def test_replay_refuses_events_after_cancellation():
    cancel = se.schedule_state(action="cancelled", schedule_id="s", at=T0 + 1,
                               definition=DEFINITION, revision=1, expected_revision=1,
                               next_at=T0, last_at=None, cancelled_at=T0 + 1, active=(),
                               membership_complete=True)
    assert _replay_refusal([_registered(), cancel, _delivered(expected_revision=2)]).reason == \
        "schedule_cancelled"


# ---- reads -----------------------------------------------------------------------------

def test_pages_use_an_exclusive_cursor_in_lexical_order():
    h = Harness()
    for name in ["b", "a", "c", "aa", "é"]:
        h.declare(T0, declaration_id=name, every={"minutes": 1})
    first, cursor = h.table.page(limit=2)
    assert [item["id"] for item in first] == ["a", "aa"] and cursor == "aa"
    rest, end = h.table.page(limit=100, cursor=cursor)
    assert [item["id"] for item in rest] == ["b", "c", "é"] and end is None
    assert len(h.table.page()[0]) == 5


@pytest.mark.parametrize("limit", [0, 101, True, "5", 1.0])
def test_page_limit_is_checked(limit):
    with pytest.raises(RequestRefused) as info:
        ScheduleTable().page(limit=limit)
    assert info.value.details["field"] == "limit"


def test_status_object_fields():
    h = Harness()
    h.declare(T0, cron="0 9 * * *", timezone="+02", args={"a": 1}, overlap="queue")
    obj = h.table.status("s")
    assert obj == {
        "id": "s", "task": "t", "args": {"a": 1}, "kind": "cron", "cron": "0 9 * * *",
        "every_ms": None, "timezone": "+02", "catch_up": "latest", "overlap": "queue",
        "options": {}, "revision": 1, "next_at": T0 + 7 * 3_600_000, "last_at": None,
        "cancelled_at": None, "active_job_id": None,
    }


def test_status_errors():
    table = ScheduleTable()
    with pytest.raises(RequestRefused) as missing:
        table.status("nope")
    with pytest.raises(RequestRefused) as bad:
        table.cancel(5, T0)
    assert (missing.value.code, bad.value.code) == ("schedule_not_found", "invalid_schedule_id")


# ---- replay equivalence ------------------------------------------------------------------

_step = st.one_of(
    st.tuples(st.just("declare"), st.sampled_from("ab"), st.sampled_from([1, 2]),
              st.sampled_from(["allow", "skip", "queue"]), st.sampled_from(["latest", "all"])),
    st.tuples(st.just("tick"), st.integers(0, 4 * MINUTE), st.booleans()),
    st.tuples(st.just("finish"), st.integers(0, 20), st.sampled_from(["completed", "executing"])),
    st.tuples(st.just("cancel"), st.sampled_from("ab")),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_step, max_size=25))
def test_random_histories_replay_to_the_same_table(steps):
    h = Harness()
    now = T0
    for step in steps:
        if step[0] == "declare":
            _, name, minutes, overlap, catch_up = step
            try:
                h.declare(now, declaration_id=name, every={"minutes": minutes},
                          overlap=overlap, catch_up=catch_up)
            except RequestRefused as refusal:
                assert refusal.code == "schedule_conflict"
        elif step[0] == "tick":
            now += step[1]
            h.tick(now, admit=step[2])
        elif step[0] == "finish" and h.jobs:
            job = sorted(h.jobs)[step[1] % len(h.jobs)]
            h.jobs[job] = step[2]
        elif step[0] == "cancel" and h.table.get(step[1]) is not None:
            h.commit(h.table.cancel(step[1], now))
    assert h.replayed().states() == h.table.states()


def test_cron_sequences_end_at_the_last_computable_date():
    from tay.engine.schedules.cron import LAST_COMPUTABLE_MS, next_after, parse_cron

    assert next_after(parse_cron("* * * * *"), 0, LAST_COMPUTABLE_MS) is None
    late = LAST_COMPUTABLE_MS - 300 * 86_400_000  # the next 1 January is in year 10000
    assert next_after(parse_cron("0 0 1 1 *"), 0, late) is None
    assert next_after(parse_cron("0 0 1 1 *"), 14 * 60, late) is None
    assert next_after(parse_cron("* * * * *"), -14 * 60, late) == late - late % MINUTE + MINUTE

"""Schedules wired into the engine: requests, delivery in tick, overlap, catch-up, replay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.engine.schedules.timing import Timing, occurrence_job_id
from tay.storage.events import encode_event
from tests.engine.conftest import T0, Driver, executes, refusal, reply

SECOND, MINUTE, HOUR = 1_000, 60_000, 3_600_000


def declare(d: Driver, **request) -> dict:
    request.setdefault("declaration_id", "s")
    request.setdefault("task", "t")
    return reply(d.run(c.Schedule("p", d.rid(), request))).fields


def status(d: Driver, schedule_id: str = "s") -> dict:
    return reply(d.run(c.ScheduleStatus("p", d.rid(), {"schedule_id": schedule_id}))).fields["schedule"]


def names(out) -> list[str]:
    return [event.name for _, event in out.events]


def replay(journal, config=None) -> Driver:
    fresh = Driver(config)
    for sequence, event in journal:
        fresh.engine.replay(sequence, event.type, event.schema, encode_event(event))
    return fresh


def restart_after(d: Driver, downtime_ms: int) -> Driver:
    """A fresh engine replayed from ``d``'s journal, its wall clock ``downtime_ms`` later."""
    fresh = replay(d.journal)
    fresh.now, fresh.mono = d.now + downtime_ms, d.mono
    return fresh


def job_ids(d: Driver) -> set[str]:
    return {job_id.hex() for job_id in d.engine.jobs}


def test_declare_reply_is_released_after_its_event():
    d = Driver()
    out = d.run(c.Schedule("p", "r1", {"declaration_id": "s", "task": "t", "every": {"seconds": 10}}))
    assert names(out) == ["schedule_state"]
    fields = reply(out).fields
    assert fields["schedule_id"] == "s"
    assert fields["schedule"]["revision"] == 1 and fields["schedule"]["next_at"] == d.now
    assert fields["schedule"]["every_ms"] == 10_000 and fields["schedule"]["overlap"] == "skip"


def test_idempotent_redeclare_writes_nothing_and_replacement_bumps_revision():
    d = Driver()
    declare(d, every={"seconds": 10}, delay=60)
    d.advance(5 * SECOND)
    out = d.run(c.Schedule("p", "r", {"declaration_id": "s", "task": "t", "every": {"seconds": 10},
                                      "delay": 60}))
    assert out.events == [] and reply(out).fields["schedule"]["next_at"] == T0 + 60 * SECOND
    replaced = declare(d, every={"seconds": 20})
    assert replaced["schedule"]["revision"] == 2 and replaced["schedule"]["next_at"] == d.now
    assert replaced["schedule"]["every_ms"] == 20_000


def test_generated_id_is_a_24_character_token():
    d = Driver()
    fields = reply(d.run(c.Schedule("p", "r", {"task": "t", "every": {"minutes": 1}}))).fields
    assert len(fields["schedule_id"]) == 24 and fields["schedule"]["id"] == fields["schedule_id"]


def test_every_fires_at_once_and_delivers_the_deterministic_job():
    d = Driver()
    declare(d, args={"n": 1}, every={"seconds": 10}, options={"queue": "q", "retries": 2})
    assert d.engine.next_wakeup() == d.mono
    out = d.tick()
    assert names(out) == ["job_inserted", "schedule_delivered"]  # advancement after admission
    job_id = occurrence_job_id("s", T0)
    job = d.engine.job_view(job_id)
    assert (job["task"], job["args"], job["queue"], job["max_attempts"]) == ("t", {"n": 1}, "q", 3)
    schedule = status(d)
    assert schedule["last_at"] == T0 and schedule["next_at"] == T0 + 10 * SECOND
    assert schedule["active_job_id"] == job_id.hex()
    assert d.engine.next_wakeup() == d.mono + 10 * SECOND


def test_cron_first_occurrence_is_the_next_matching_minute():
    d = Driver()
    fields = declare(d, cron="*/5 * * * *")
    expected = Timing.of({"kind": "cron", "expression": "*/5 * * * *", "timezone": "+00",
                          "catch_up": "latest"}).first_due(T0)
    assert fields["schedule"]["next_at"] == expected and expected % (5 * MINUTE) == 0
    assert names(d.tick()) == [] or expected <= d.now
    d.advance(expected - d.now)
    assert names(d.tick()) == ["job_inserted", "schedule_delivered"]
    assert d.engine.job(occurrence_job_id("s", expected)).state == "available"


def test_delivery_dispatches_to_a_registered_worker():
    d = Driver()
    d.worker(tasks=("t",))
    declare(d, every={"seconds": 10})
    out = d.tick()
    assert names(out) == ["job_inserted", "schedule_delivered", "job_started"]
    assert executes(out)[0].job_id == occurrence_job_id("s", T0).hex()


@pytest.mark.parametrize("overlap, expected", [
    ("allow", ["job_inserted", "schedule_delivered", "job_started"]),
    ("skip", ["schedule_state"]),
    ("queue", []),
])
def test_overlap_against_a_busy_previous_job(overlap, expected):
    d = Driver()
    d.worker(tasks=("t",))
    declare(d, every={"seconds": 10}, overlap=overlap)
    first = executes(d.tick())[0]
    d.advance(10 * SECOND)
    out = d.tick()
    assert names(out) == expected
    if overlap == "skip":
        assert status(d)["next_at"] == T0 + 20 * SECOND
        assert status(d)["active_job_id"] == first.job_id  # the busy link is kept
    if overlap == "queue":
        assert status(d)["next_at"] == T0 + 10 * SECOND  # the due time does not move
        d.succeed(first, {"ok": True})
        d.advance(SECOND)
        assert names(d.tick())[:2] == ["job_inserted", "schedule_delivered"]


def test_queue_waits_for_a_never_dispatched_job_too():
    d = Driver()
    declare(d, every={"seconds": 1}, overlap="queue")
    d.tick()
    d.advance(5 * SECOND)
    assert names(d.tick()) == []
    assert d.engine.next_wakeup() == d.mono + SECOND  # polls again in a second


def test_catch_up_latest_coalesces_time_the_engine_was_down():
    d = Driver()
    declare(d, every={"minutes": 1}, catch_up="latest", overlap="allow")
    d.tick()
    fresh = restart_after(d, 10 * MINUTE + 5 * SECOND)
    fresh.engine.finish_recovery(fresh.now, fresh.mono)
    out = fresh.tick()
    assert names(out) == ["job_inserted", "schedule_delivered"]
    assert status(fresh)["next_at"] == T0 + 11 * MINUTE
    assert fresh.engine.job(occurrence_job_id("s", T0 + MINUTE)) is not None


def test_catch_up_all_delivers_every_missed_occurrence_serially():
    d = Driver()
    declare(d, every={"minutes": 1}, catch_up="all", overlap="allow")
    d.tick()
    fresh = restart_after(d, 10 * MINUTE + 5 * SECOND)
    out = fresh.tick()
    assert names(out) == ["job_inserted", "schedule_delivered"] * 10
    assert all(fresh.engine.job(occurrence_job_id("s", T0 + k * MINUTE)) for k in range(11))
    assert status(fresh)["next_at"] == T0 + 11 * MINUTE


def test_cancellation_keeps_admitted_jobs_and_stops_delivery():
    d = Driver()
    d.worker(tasks=("t",))
    declare(d, every={"seconds": 10}, overlap="allow", options={"timeout_ms": 86_400_000})
    running = executes(d.tick())[0]
    out = d.run(c.CancelSchedule("p", d.rid(), {"schedule_id": "s"}))
    assert names(out) == ["schedule_state"]
    fields = reply(out).fields
    assert fields["schedule"]["cancelled_at"] == d.now and fields["schedule"]["next_at"] is None
    again = d.run(c.CancelSchedule("p", d.rid(), {"schedule_id": "s"}))
    assert again.events == [] and reply(again).fields["schedule"]["cancelled_at"] == T0
    d.advance(HOUR)
    assert names(d.tick()) == [] and d.engine.schedules.next_wakeup() is None
    assert d.engine.job(bytes.fromhex(running.job_id)).state == "executing"


def test_pages_follow_exclusive_cursors_in_lexical_order():
    d = Driver()
    for name in ("b", "a", "d", "c", "e"):
        declare(d, declaration_id=name, every={"hours": 1}, delay=3600)
    first = reply(d.run(c.ListSchedules("p", d.rid(), {"limit": 2}))).fields
    assert [s["id"] for s in first["schedules"]] == ["a", "b"] and first["next_cursor"] == "b"
    rest = reply(d.run(c.ListSchedules("p", d.rid(), {"limit": 3, "cursor": "b"}))).fields
    assert [s["id"] for s in rest["schedules"]] == ["c", "d", "e"] and rest["next_cursor"] is None
    default = reply(d.run(c.ListSchedules("p", d.rid(), {}))).fields
    assert len(default["schedules"]) == 5


def test_pages_shrink_to_the_reply_limit_and_refuse_an_object_that_cannot_fit():
    d = Driver(EngineConfig(max_reply_bytes=4096))
    for name in ("a", "b", "c"):
        declare(d, declaration_id=name, every={"hours": 1}, args={"pad": "x" * 1000})
    page = reply(d.run(c.ListSchedules("p", d.rid(), {"limit": 3}))).fields
    assert [s["id"] for s in page["schedules"]] == ["a", "b"] and page["next_cursor"] == "b"
    declare(d, declaration_id="big", every={"hours": 1}, args={"pad": "x" * 5000})
    error = refusal(d.run(c.ListSchedules("p", d.rid(), {"cursor": "b", "limit": 1})))
    assert error["code"] == "response_too_large" and error["schedule_id"] == "big"


def test_bad_requests_are_typed_refusals():
    d = Driver()
    assert refusal(d.run(c.Schedule("p", "r", ["not", "an", "object"])))["code"] == "invalid_schedule"
    bad = refusal(d.run(c.Schedule("p", "r", {"task": "t", "every": {"seconds": 1},
                                              "options": {"retries": -1}})))
    assert bad["code"] == "invalid_schedule" and bad["field"] == "options.retries"
    huge = refusal(d.run(c.Schedule("p", "r", {"task": "t", "every": {"seconds": 1},
                                               "args": {"pad": "x" * 300_000}})))
    assert huge["code"] == "invalid_schedule" and huge["field"] == "args"
    assert refusal(d.run(c.ScheduleStatus("p", "r", {"schedule_id": 5})))["code"] == "invalid_schedule_id"
    assert refusal(d.run(c.ScheduleStatus("p", "r", {"schedule_id": "x"})))["code"] == "schedule_not_found"
    assert refusal(d.run(c.CancelSchedule("p", "r", {"schedule_id": "x"})))["code"] == "schedule_not_found"
    unknown = refusal(d.run(c.ListSchedules("p", "r", {"page": 2})))
    assert unknown["code"] == "invalid_request" and unknown["field"] == "page"
    assert refusal(d.run(c.ListSchedules("p", "r", {"limit": 101})))["code"] == "invalid_request"


def test_restart_replays_the_same_table_and_jobs():
    d = Driver()
    d.worker(tasks=("t",))
    declare(d, declaration_id="a", every={"seconds": 10}, overlap="allow")
    declare(d, declaration_id="b", cron="* * * * *", overlap="skip")
    for _ in range(4):
        for execute in executes(d.tick()):
            d.succeed(execute, {"ok": 1})
        d.advance(20 * SECOND)
    d.run(c.CancelSchedule("p", d.rid(), {"schedule_id": "a"}))
    fresh = replay(d.journal)
    assert fresh.engine.schedules.states() == d.engine.schedules.states()
    assert {k: e.state for k, e in fresh.engine.jobs.items()} == \
        {k: e.state for k, e in d.engine.jobs.items()}
    assert fresh.engine.next_sequence == d.engine.next_sequence
    assert fresh.engine.budget.used == d.engine.budget.used


def test_a_crash_between_insert_and_delivery_reuses_the_existing_job():
    d = Driver()
    declare(d, every={"seconds": 10})
    out = d.tick()
    assert names(out) == ["job_inserted", "schedule_delivered"]
    fresh = replay(d.journal[:-1])  # the delivered record never reached the disk
    out = fresh.tick()
    assert names(out) == ["schedule_delivered"]
    assert status(fresh)["last_at"] == T0


def test_admission_failure_retries_the_same_occurrence_id():
    d = Driver()
    declare(d, every={"seconds": 10}, overlap="allow")
    d.engine.budget.limit = d.engine.budget.used + 100  # the occurrence's job cannot fit
    assert names(d.tick()) == []
    assert d.engine.next_wakeup() == d.mono + SECOND
    d.advance(SECOND // 2)
    assert names(d.tick()) == []
    d.engine.budget.limit = 10**9  # room again (as if terminal jobs had expired)
    d.advance(SECOND // 2)
    assert names(d.tick()) == ["job_inserted", "schedule_delivered"]
    assert d.engine.job(occurrence_job_id("s", T0)) is not None  # the same occurrence id
    assert status(d)["last_at"] == T0


def test_schedules_are_charged_to_the_state_budget():
    d = Driver(EngineConfig(max_state_bytes=4000))
    before = d.engine.budget.used
    declare(d, every={"hours": 1}, delay=3600)
    assert d.engine.budget.used > before
    error = refusal(d.run(c.Schedule("p", "r", {"declaration_id": "big", "task": "t",
                                                "every": {"hours": 1}, "args": {"p": "x" * 900}})))
    assert error["code"] == "capacity" and error["reason"] == "retained_bytes"


def test_next_wakeup_maps_wall_time_to_the_monotonic_clock():
    d = Driver()
    declare(d, every={"minutes": 1}, start_at=T0 + MINUTE)
    assert d.engine.next_wakeup() == d.mono + MINUTE


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("declare"), st.sampled_from("abc"), st.sampled_from(["allow", "skip", "queue"]),
              st.sampled_from(["latest", "all"]), st.integers(1, 30)),
    st.tuples(st.just("cancel"), st.sampled_from("abc")),
    st.tuples(st.just("advance"), st.integers(0, 45_000)),
    st.tuples(st.just("finish"), st.integers(0, 3)),
), max_size=25)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_any_schedule_history_replays_to_the_same_engine(operations):
    d = Driver()
    d.worker(tasks=("t",), capacity=2)
    running: list = []
    for operation in operations:
        if operation[0] == "declare":
            _, name, overlap, catch_up, seconds = operation
            d.run(c.Schedule("p", d.rid(), {"declaration_id": name, "task": "t", "overlap": overlap,
                                            "catch_up": catch_up, "every": {"seconds": seconds}}))
        elif operation[0] == "cancel":
            d.run(c.CancelSchedule("p", d.rid(), {"schedule_id": operation[1]}))
        elif operation[0] == "advance":
            d.advance(operation[1])
            running.extend(executes(d.tick()))
        elif running:
            running.extend(executes(d.succeed(running.pop(operation[1] % len(running)))))
    fresh = replay(d.journal)
    assert fresh.engine.schedules.states() == d.engine.schedules.states()
    assert {k: e.state for k, e in fresh.engine.jobs.items()} == \
        {k: e.state for k, e in d.engine.jobs.items()}
    assert fresh.engine.budget.used == d.engine.budget.used
    for state in d.engine.schedules.states().values():  # membership only holds admitted jobs
        assert all(job in d.engine.jobs for job in state.active)

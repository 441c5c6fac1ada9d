"""The per-day history (tay.engine.day_history): the activity folds each minute that leaves
its ring into the minute's UTC day; the engine records the days that moved as (32,2)
``day_totals``, whose last one per day a replay (v1 journal, Store-v2 tail) and a base
checkpoint give back; a day's totals are what it recorded plus what was counted since."""

from __future__ import annotations

import random

import pytest

from tay.engine import EngineConfig, Execute
from tay.engine import commands as c
from tay.engine.activity import MINUTE_MS, RING_MINUTES, Activity
from tay.engine.day_history import DayHistory
from tay.storage import events as ev
from tay.storage.events.operations import DAY_MS, day_totals
from tests.engine.conftest import T0, Driver, refusal, reply
from tests.engine.test_engine_epoch import epoch_driver, load_base, replay_tail

DAY0 = T0 // DAY_MS


def test_the_activity_counts_each_day_through_the_ring_and_past_it():
    """Counts at random times (mostly forward, some late, a few older than the whole ring)
    sum per UTC day exactly, whatever the ring kept."""
    rng = random.Random(5)
    activity = Activity()
    expected: dict[int, list[int]] = {}
    now = T0
    for _ in range(3_000):
        now += rng.choice((0, 1_000, 20_000, MINUTE_MS, 7 * MINUTE_MS))
        at = now - rng.choice((0, 0, 0, 30_000, 3 * MINUTE_MS, (RING_MINUTES + 5) * MINUTE_MS))
        outcome = rng.choice(("enqueued", "completed", "failed", "timed_out", "discarded",
                              "cancelled", "interrupted"))
        if outcome == "enqueued":
            activity.enqueued("q", "t", at)
        elif outcome == "completed":
            activity.completed("q", "t", at, 5)
        else:
            activity.count(outcome, "q", "t", at)
        column = {"enqueued": 0, "completed": 1}.get(
            outcome, 2 if outcome in ("failed", "timed_out", "discarded") else None)
        if column is not None:
            expected.setdefault(at // DAY_MS, [0, 0, 0])[column] += 1
    assert now - T0 > 3 * DAY_MS  # the walk crossed days, so minutes left the ring
    assert activity.days() == expected


def test_totals_are_the_last_record_plus_what_was_counted_since():
    history = DayHistory()
    history.apply(day_totals(10, 5, 4, 1, at=0), None)  # replayed: nothing counted yet
    assert history.totals({}) == {10: (5, 4, 1)}
    live = {10: [2, 1, 0], 11: [1, 0, 0]}
    assert history.totals(live) == {10: (7, 5, 1), 11: (1, 0, 0)}
    written = history.unrecorded(live, 99)
    assert [(e["day"], e["enqueued"], e["completed"], e["failed"], e["at"]) for e in written] \
        == [(10, 7, 5, 1, 99), (11, 1, 0, 0, 99)]
    for event in written:  # applied live, with the counts they hold
        history.apply(event, live[event["day"]])
    assert history.unrecorded(live, 100) == []
    assert history.totals(live) == {10: (7, 5, 1), 11: (1, 0, 0)}
    live[11][1] += 3
    assert history.totals(live)[11] == (1, 3, 0)
    (again,) = history.unrecorded(live, 101)
    assert (again["day"], again["completed"]) == (11, 3)


def _finish_all(driver: Driver, succeed: int, fail: int, prefix: int) -> None:
    """``succeed`` + ``fail`` jobs enqueued and finished (no retries), one at a time."""
    for k in range(succeed + fail):
        out = driver.enqueue(task="t", retries=0, id=f"{prefix:016x}{k:016x}")
        (execute,) = [e for e in out.effects if isinstance(e, Execute)]
        if k < succeed:
            driver.succeed(execute)
        else:
            driver.fail(execute, {"type": "E", "message": "no"})


def _history(driver: Driver, days: int = 3) -> list[tuple[int, int, int, int]]:
    got = reply(driver.run(c.Admin("p", driver.rid(), "history", {"days": days}))).fields
    return [(row["day"] // DAY_MS, row["enqueued"], row["completed"], row["failed"])
            for row in got["days"]]


def _record(driver: Driver) -> int:
    return reply(driver.run(c.Admin("p", driver.rid(), "record_days", {}))).fields["recorded"]


@pytest.mark.parametrize("store", ["v1", "v2"])
def test_recorded_days_come_back_after_a_replay_and_through_a_base(store):
    driver = epoch_driver() if store == "v2" else Driver(EngineConfig(queues={"q1": 2}))
    driver.worker(capacity=1)
    driver.now = (DAY0 + 1) * DAY_MS - 10 * MINUTE_MS  # late in a day
    _finish_all(driver, 3, 1, 1)
    driver.advance(20 * MINUTE_MS)  # the next day
    _finish_all(driver, 2, 2, 2)
    assert _history(driver) == [(DAY0 - 1, 0, 0, 0), (DAY0, 4, 3, 1), (DAY0 + 1, 4, 2, 2)]
    assert _record(driver) == 2
    assert _record(driver) == 0  # nothing moved since
    records = [event for _, event in driver.journal
               if (event.pair == ev.DAY_TOTALS or getattr(event, "name", "") == "day_totals")]
    assert len(records) == 2
    _finish_all(driver, 1, 0, 3)  # counted, not recorded: a crash would lose it
    assert _history(driver)[-1] == (DAY0 + 1, 5, 3, 2)

    if store == "v2":
        fresh = replay_tail(driver.journal)
    else:
        fresh = Driver(EngineConfig(queues={"q1": 2}))
        for sequence, event in driver.journal:
            fresh.engine.consume_event(sequence, event)
    fresh.now = driver.now
    assert _history(fresh) == [(DAY0 - 1, 0, 0, 0), (DAY0, 4, 3, 1), (DAY0 + 1, 4, 2, 2)]
    fresh.worker(capacity=1)
    _finish_all(fresh, 0, 1, 4)  # counted on top of the replayed totals
    assert _history(fresh)[-1] == (DAY0 + 1, 5, 2, 3)
    assert _record(fresh) == 1
    assert fresh.engine.day_history.recorded[DAY0 + 1] == (5, 2, 3)

    if store == "v2":  # a base checkpoints each day's last record, at its entity's revision
        _record(driver)
        based = load_base(driver.engine)
        based.now = driver.now
        assert _history(based) == [(DAY0 - 1, 0, 0, 0), (DAY0, 4, 3, 1), (DAY0 + 1, 5, 3, 2)]
        assert based.engine.epoch.entities[("day", DAY0 + 1)] == 2
        assert based.engine.epoch.entities == driver.engine.epoch.entities


def test_history_refuses_a_bad_days():
    driver = Driver()
    for days in (0, 3_661, "7", 1.5, True):
        assert refusal(driver.run(c.Admin("p", driver.rid(), "history", {"days": days}))) \
            ["field"] == "days"
    assert refusal(driver.run(c.Admin("p", driver.rid(), "history", {"limit": 3})))
    assert len(_history(driver, 30)) == 30  # the default too
    got = reply(driver.run(c.Admin("p", driver.rid(), "history", {}))).fields
    assert len(got["days"]) == 30 and got["days"][-1]["day"] == DAY0 * DAY_MS


@pytest.mark.parametrize("payload, field", [
    ({"at": 1, "completed": 0, "day": 1, "enqueued": 0}, None),
    ({"at": 1, "completed": 0, "day": 1, "enqueued": 0, "failed": -1}, "day_totals.failed"),
    ({"at": 1, "completed": 0, "day": 2**63 // DAY_MS + 1, "enqueued": 0, "failed": 0},
     "day_totals.day"),
    ({"at": 1, "completed": "3", "day": 1, "enqueued": 0, "failed": 0},
     "day_totals.completed"),
    ({"at": 1, "completed": 0, "day": 1, "enqueued": 0, "failed": 0, "queue": "q"}, None),
])
def test_a_day_totals_payload_outside_its_layout_is_refused(payload, field):
    from tay.storage.events.registry import PayloadRefused, spec_for

    with pytest.raises(PayloadRefused) as refused:
        spec_for(ev.DAY_TOTALS).validate(payload)
    if field is not None:
        assert field in str(refused.value.__dict__) or field in str(refused.value)

"""The activity counters (``tay.engine.activity``) against independent counts.

``Activity`` keeps its counts per (queue, task) as one row and caches the bucket of the
minute it counted last; what its readers get (``jobs``: (outcome, queue, task) -> n above
zero; ``per_minute``: the ring's last 60 minutes) must be what a plain count of every call
gives: here a reference written the obvious way (a dict per key, a dict per minute trimmed
to the newest 61 as the ring keeps them), then a Store-v2 engine on the fused path driven
across clock minutes, counted by the test from its own actions.
"""

from __future__ import annotations

import random
from functools import partial
from collections import Counter

import pytest

from tay.engine import Execute
from tay.engine import commands as c
from tay.engine import activity as activity_module
from tay.engine.activity import (
    OTHERS, RUN_BOUNDS_MS, MINUTE_MS, OUTCOMES, RING_MINUTES, Activity, TaskHour,
)
from tay.storage.events.transitions import STATES
from tests.engine.conftest import T0, reply
from tests.engine.test_engine_epoch import replay_tail
from tests.engine.test_fused_commits import epoch_driver

RING_COLUMNS = {"enqueued": "enqueued", "completed": "completed", "failed": "failed",
                "timed_out": "failed", "discarded": "failed"}


class Reference:
    """Every count kept the obvious way."""

    def __init__(self) -> None:
        self.jobs: Counter[tuple[str, str, str]] = Counter()
        self.minutes: dict[int, Counter[str]] = {}

    def count(self, outcome: str, queue: str, task: str, at: int) -> None:
        self.jobs[(outcome, queue, task)] += 1
        column = RING_COLUMNS.get(outcome)
        if column is None:
            return
        minute = at // MINUTE_MS
        bucket = self.minutes.get(minute)
        if bucket is None:
            bucket = self.minutes[minute] = Counter()
            if len(self.minutes) > RING_MINUTES + 1:  # the ring drops its oldest minute
                del self.minutes[min(self.minutes)]  # (this one, if it is the oldest)
        bucket[column] += 1

    def per_minute(self, now: int) -> list[dict[str, int]]:
        current = now // MINUTE_MS
        return [{"minute": minute * MINUTE_MS,
                 **{name: self.minutes.get(minute, Counter())[name]
                    for name in ("enqueued", "completed", "failed")}}
                for minute in range(current - RING_MINUTES + 1, current + 1)]


def same(activity: Activity, reference: Reference, now: int) -> None:
    assert activity.jobs == dict(reference.jobs)
    assert activity.per_minute(now) == reference.per_minute(now)


def call(activity: Activity, outcome: str, queue: str, task: str, at: int) -> None:
    if outcome == "enqueued" and at % 2:
        activity.enqueued(queue, task, at)  # the fused paths' entries, and the general one
    elif outcome == "completed" and at % 2:
        activity.completed(queue, task, at, at % 1_000)
    else:
        activity.count(outcome, queue, task, at)


@pytest.mark.parametrize("seed", range(8))
def test_counts_equal_a_plain_count_across_minutes_and_the_ring_trim(seed):
    rng = random.Random(seed)
    activity, reference = Activity(), Reference()
    now = T0 + rng.randrange(MINUTE_MS)
    queues = [f"q{i}" for i in range(3)]
    tasks = [f"t{i}" for i in range(3)]
    for step in range(3_000):
        move = rng.random()
        if move < 0.05:
            now += rng.randrange(1, 3 * MINUTE_MS)  # into a later minute (or several)
        elif move < 0.06:
            now -= rng.randrange(1, 2 * MINUTE_MS)  # a clock stepping back
        elif move < 0.065:
            now -= rng.randrange(70, 90) * MINUTE_MS  # older than the whole ring
        elif move < 0.3:
            now += rng.randrange(200)
        outcome = rng.choice(OUTCOMES + ("enqueued", "completed") * 3)
        # queue and task as new string objects each time, as parsed frames give them
        queue = "".join(rng.choice(queues))
        task = "".join(rng.choice(tasks))
        call(activity, outcome, queue, task, now)
        reference.count(outcome, queue, task, now)
        if step % 97 == 0:
            same(activity, reference, now)
    same(activity, reference, now)
    for later in (0, MINUTE_MS, 59 * MINUTE_MS, 61 * MINUTE_MS):
        assert activity.per_minute(now + later) == reference.per_minute(now + later)
    assert {outcome for outcome, _, _ in activity.jobs} == set(OUTCOMES)


def test_the_bucket_of_a_minute_left_and_come_back_to_is_the_ring_s():
    activity, reference = Activity(), Reference()
    for at in (T0, T0 + MINUTE_MS, T0 + 1, T0 + MINUTE_MS + 1, T0 + 2):
        activity.enqueued("q", "t", at)
        activity.completed("q", "t", at, 5)
        for method in ("enqueued", "completed"):
            reference.count(method, "q", "t", at)
    same(activity, reference, T0 + MINUTE_MS)
    # 61 newer minutes push the first two out of the ring; counting the first again makes a
    # fresh bucket that the trim drops at once, and the ring does not show it
    for minute in range(2, 2 + RING_MINUTES + 1):
        activity.enqueued("q", "t", T0 + minute * MINUTE_MS)
        reference.count("enqueued", "q", "t", T0 + minute * MINUTE_MS)
    activity.completed("q", "t", T0, 5)
    reference.count("completed", "q", "t", T0)
    activity.completed("q", "t", T0 + 5, 5)
    reference.count("completed", "q", "t", T0 + 5)
    same(activity, reference, T0 + (RING_MINUTES + 2) * MINUTE_MS)
    same(activity, reference, T0 + RING_MINUTES * MINUTE_MS)


def test_a_minute_s_first_and_last_millisecond():
    activity, reference = Activity(), Reference()
    start = (T0 // MINUTE_MS + 1) * MINUTE_MS
    outcomes = ("enqueued", "completed", "failed")
    for first in range(3):  # each way of counting first at a minute's edge
        for at in (start - 1, start, start + MINUTE_MS - 1, start + MINUTE_MS, start - 1,
                   start + 2 * MINUTE_MS, start + 2 * MINUTE_MS - 1):
            for outcome in outcomes[first:] + outcomes[:first]:
                if outcome == "completed":
                    activity.completed("q", "t", at, 1)
                else:
                    getattr(activity, outcome, partial(activity.count, outcome))("q", "t", at)
                reference.count(outcome, "q", "t", at)
        same(activity, reference, start + 2 * MINUTE_MS)


def test_an_outcome_outside_the_labels_is_still_counted():
    activity = Activity()
    activity.count("other", "q", "t", T0)
    activity.count("other", "q", "t", T0)
    activity.count("enqueued", "q", "t", T0)
    assert activity.jobs == {("other", "q", "t"): 2, ("enqueued", "q", "t"): 1}
    assert activity.per_minute(T0)[-1]["enqueued"] == 1


def executions(out) -> list[Execute]:
    return [effect for effect in out.effects if isinstance(effect, Execute)]


@pytest.mark.parametrize("seed", range(3))
def test_an_engine_s_counts_equal_the_test_s_own_across_minutes(seed):
    """Many jobs on two queues and two tasks through the fused enqueue and success and the
    general failure (no retries: discarded), cancel and retry, the clock crossing minutes
    and the ring (what runs succeeds before a jump, so nothing times out); the engine's
    ``jobs`` and per-minute rows equal what the test counted; replay of the same journal
    counts nothing. The other labels take ``count``, checked in the tests above."""
    rng = random.Random(seed)
    driver = epoch_driver(seed, "uncapped", True)
    expected: Counter[tuple[str, str, str]] = Counter()
    minutes: dict[int, Counter[str]] = {}
    running: list[Execute] = []
    conns = {"w1": ("a", "b"), "w2": ("a",)}

    def counted(outcome: str, queue: str, task: str) -> None:
        expected[(outcome, queue, task)] += 1
        column = RING_COLUMNS.get(outcome)
        if column is not None:
            minutes.setdefault(driver.now // MINUTE_MS, Counter())[column] += 1

    def take(out) -> None:
        running.extend(executions(out))


    for conn, tasks in conns.items():
        take(driver.worker(conn=conn, tasks=tasks, capacity=3))
    discarded: list[str] = []
    for step in range(900):
        if rng.random() < 0.03:
            while running:
                execute = running.pop()
                take(driver.succeed(execute))
                counted("completed", execute.queue, execute.task)
            driver.advance(rng.randrange(MINUTE_MS // 2, 4 * MINUTE_MS))
            take(driver.tick())
        else:
            driver.advance(rng.randrange(300))
        move = rng.random()
        if move < 0.45 or not running:
            queue, task = rng.choice(("q1", "q2")), rng.choice(("a", "b"))
            out = driver.enqueue(task=task, queue=queue, retries=0)
            reply(out)
            counted("enqueued", queue, task)
            take(out)
        elif move < 0.8:
            execute = running.pop(rng.randrange(len(running)))
            take(driver.succeed(execute))
            counted("completed", execute.queue, execute.task)
        elif move < 0.9:
            execute = running.pop(rng.randrange(len(running)))
            take(driver.fail(execute))
            assert driver.status(execute.job_id)["state"] == "discarded"
            counted("discarded", execute.queue, execute.task)
            discarded.append(execute.job_id)
        elif move < 0.93 and discarded:
            job_id = discarded.pop()
            job = driver.status(job_id)
            take(driver.run(c.Admin("p", driver.rid(), "retry_job", {"job_id": job_id})))
            counted("retried", job["queue"], job["task"])
        else:
            waiting = [row for row in reply(driver.run(c.Admin(
                "p", driver.rid(), "jobs", {"state": "available", "limit": 5}))).fields["jobs"]]
            if waiting:
                row = waiting[0]
                take(driver.run(c.Admin("p", driver.rid(), "cancel_job", {"job_id": row["id"]})))
                counted("cancelled", row["queue"], row["task"])
    engine = driver.engine
    assert engine.activity.jobs == dict(expected)
    current = driver.now // MINUTE_MS
    kept = sorted(minutes)[-(RING_MINUTES + 1):]
    assert driver.now - T0 > RING_MINUTES * MINUTE_MS  # the ring has trimmed
    rows = reply(driver.run(c.Admin("p", driver.rid(), "activity", {}))).fields["per_minute"]
    assert rows == [{"minute": minute * MINUTE_MS,
                     **{name: (minutes[minute][name] if minute in kept else 0)
                        for name in ("enqueued", "completed", "failed")}}
                    for minute in range(current - RING_MINUTES + 1, current + 1)]
    assert {outcome for outcome, _, _ in expected} >= {
        "enqueued", "completed", "discarded", "retried", "cancelled"}
    fresh = replay_tail(driver.journal).engine
    assert fresh.job_count() == engine.job_count()
    assert fresh.activity.jobs == {}
    assert all(row["enqueued"] == row["completed"] == row["failed"] == 0
               for row in fresh.activity.per_minute(driver.now))


@pytest.mark.parametrize("seed", range(4))
def test_run_times_fall_in_the_bucket_of_the_first_bound_they_do_not_exceed(seed):
    rng = random.Random(seed)
    activity = Activity()
    expected: dict[tuple[str, str], list[int]] = {}
    sums: Counter = Counter()
    for _ in range(2_000):
        queue, task = rng.choice(("a", "b")), rng.choice(("x", "y"))
        run_ms = rng.choice((-3, 0, 1, 5, 6, 250, 251, 1_800_000, 1_800_001,
                             rng.randrange(4_000_000)))
        if rng.random() < 0.5:
            activity.completed(queue, task, T0, run_ms)
        else:
            activity.ran(queue, task, run_ms)
        buckets = expected.setdefault((queue, task), [0] * (len(RUN_BOUNDS_MS) + 1))
        place = next((k for k, bound in enumerate(RUN_BOUNDS_MS) if max(run_ms, 0) <= bound),
                     len(RUN_BOUNDS_MS))
        buckets[place] += 1
        sums[(queue, task)] += max(run_ms, 0)
    found = {(queue, task): (histogram, total)
             for queue, task, _, histogram, total in activity.runs()}
    assert found == {key: (expected[key], sums[key]) for key in expected}


@pytest.mark.parametrize("seed", range(5))
def test_a_task_s_last_hour_is_what_samples_in_it_saw_counted(seed):
    """``TaskHour`` against the obvious model: each sample's difference from the previous
    one, per (queue, task), lands in the sample's minute; the hour sums the minutes of the
    last RING_MINUTES; samples skip minutes, and the clock crosses several hours."""
    rng = random.Random(seed)
    activity, hour = Activity(), TaskHour()
    seen: dict[tuple[str, str], Counter[str]] = {}
    deltas: list[tuple[int, tuple[str, str], Counter[str]]] = []  # (minute, key, counts)
    at = T0
    for _ in range(600):
        at += rng.choice((50, 1_000, 20_000, 7 * MINUTE_MS))
        queue, task = rng.choice(("a", "b")), rng.choice(("x", "y", "z"))
        if rng.random() < 0.5:
            activity.completed(queue, task, at, rng.randrange(0, 5_000))
        else:
            activity.count(rng.choice(OUTCOMES), queue, task, at)
        if rng.random() < 0.3:
            hour.sample(at, activity.rows())
            for q, t, counts, histogram, total in activity.runs():
                now = Counter({**{o: n for o, n in zip(OUTCOMES, counts)},
                               **{f"h{k}": n for k, n in enumerate(histogram)}, "sum": total})
                before = seen.get((q, t), Counter())
                deltas.append((at // MINUTE_MS, (q, t), now - before))
                seen[(q, t)] = now
            # read now, and later with no sample in between (the minutes age out)
            for read_at in (at, at + rng.randrange(0, 90) * MINUTE_MS):
                floor = read_at // MINUTE_MS - RING_MINUTES + 1
                expected: dict[tuple[str, str], Counter[str]] = {}
                for minute, key, counts in deltas:
                    if minute >= floor:
                        expected.setdefault(key, Counter()).update(counts)
                got = {(q, t): Counter({**{o: n for o, n in zip(OUTCOMES, counts)},
                                        **{f"h{k}": n for k, n in enumerate(histogram)},
                                        "sum": total})
                       for q, t, counts, histogram, total in hour.runs(read_at)}
                assert {k: +v for k, v in got.items()} == \
                    {k: +v for k, v in expected.items() if +v}


def test_pairs_after_the_cap_share_one_row_and_nothing_is_lost(monkeypatch):
    """Past ``PAIRS_MAX`` (queue, task) pairs, a new pair counts in the OTHERS row (queue
    and task empty), so made-up names cannot grow the counts for life; pairs already
    counted go on one by one, and every count is still somewhere."""
    monkeypatch.setattr(activity_module, "PAIRS_MAX", 3)
    activity, reference = Activity(), Reference()
    names = [(f"q{n % 5}", f"t{n}") for n in range(12)]
    for round_ in range(3):
        for queue, task in names:
            for outcome in ("enqueued", "completed", "failed", "cancelled"):
                activity.count(outcome, queue, task, T0)
                reference.count(outcome, queue, task, T0)
            activity.ran(queue, task, 7)
    counted = activity.jobs
    first = set(names[:3])
    for (outcome, queue, task), n in reference.jobs.items():
        if (queue, task) in first:
            assert counted[(outcome, queue, task)] == n
    for outcome in ("enqueued", "completed", "failed", "cancelled"):
        assert counted[(outcome, OTHERS, OTHERS)] == 3 * (len(names) - 3)
    assert sum(counted.values()) == sum(reference.jobs.values())
    assert {(queue, task) for _, queue, task in counted} == first | {(OTHERS, OTHERS)}
    assert activity.pairs == 4
    assert OTHERS not in {queue for queue, _, _ in activity.queue_totals()}
    runs = {(queue, task): sum(histogram) for queue, task, _, histogram, _ in activity.runs()}
    assert runs[(OTHERS, OTHERS)] == 3 * (len(names) - 3)
    # an outcome outside the labels is capped the same way
    for n in range(5):
        activity.count("odd", "q", f"x{n}", T0)
    assert activity.jobs[("odd", OTHERS, OTHERS)] == 2


def test_a_queue_used_once_leaves_the_engine_s_per_queue_counts(driver):
    """Executions per queue drop a queue that runs nothing, and a sample drops the counts
    row of a queue left with no job; the queues listing and a new job of the same queue
    are as before."""
    from tay.storage.v2.manifest import Retention

    engine = driver.engine
    driver.worker(conn="w1", tasks=("t",), capacity=4)
    for n in range(20):
        out = driver.enqueue(task="t", queue=f"tenant-{n}", durability="volatile")
        (execute,) = [e for e in out.effects if isinstance(e, Execute)]
        assert engine._executing[f"tenant-{n}"] == 1
        driver.succeed(execute)
    assert not engine._executing
    driver.advance(2 * 3_600_000)
    assert engine.expire_volatile(Retention("hours", 1), driver.now) == 20
    engine.sample_queues(driver.now)
    assert not engine.queue_counts
    listed = reply(driver.run(c.Admin("p", "a", "queues", {}))).fields["queues"]
    assert [queue["name"] for queue in listed] == ["default"]  # configured: always listed
    driver.enqueue(task="t", queue="tenant-3", durability="volatile")
    assert engine.queue_counts["tenant-3"][STATES.index("executing")] == 1

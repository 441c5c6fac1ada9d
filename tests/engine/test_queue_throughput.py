"""Each queue's completed and failed jobs per minute (``tay.engine.activity.QueueThroughput``):
samples of the counts since start against a plain reference, the bound on queues, and the
engine's ``activity`` op splitting what finished by queue."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from tay.engine import Execute
from tay.engine import activity as activity_module
from tay.engine import commands as c
from tay.engine.activity import MINUTE_MS, RING_MINUTES, QueueThroughput
from tests.engine.conftest import T0, Driver, reply

# each step: seconds after T0, then (queue, completed, failed) finished since the step before
steps = st.lists(st.tuples(st.integers(0, 3 * RING_MINUTES * MINUTE_MS // 1000),
                           st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 50),
                                              st.integers(0, 5)), max_size=4)),
                 max_size=40)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_each_sample_adds_what_finished_since_the_last_one_to_its_minute(steps):
    throughput, totals, seen = QueueThroughput(), {}, {}
    now = T0
    for seconds, finished in sorted(steps):
        now = T0 + seconds * 1000
        for queue, completed, failed in finished:
            done, lost = totals.get(queue, (0, 0))
            totals[queue] = (done + completed, lost + failed)
            key = (queue, now // MINUTE_MS)
            before = seen.get(key, (0, 0))
            seen[key] = (before[0] + completed, before[1] + failed)
        throughput.sample(now, [(queue, *counts) for queue, counts in totals.items()])
    current = now // MINUTE_MS
    minutes = range(current - RING_MINUTES + 1, current + 1)
    expected = []
    for queue in "abcd":
        completed = [seen.get((queue, m), (0, 0))[0] for m in minutes]
        failed = [seen.get((queue, m), (0, 0))[1] for m in minutes]
        if sum(completed) or sum(failed):
            expected.append({"queue": queue, "completed": sum(completed),
                             "failed": sum(failed), "completed_per_minute": completed,
                             "failed_per_minute": failed})
    expected.sort(key=lambda row: (-row["completed"] - row["failed"], row["queue"]))
    assert throughput.per_minute(now, 8) == expected
    assert throughput.per_minute(now, 2) == expected[:2]


def test_queues_past_the_bound_are_not_followed(monkeypatch):
    monkeypatch.setattr(activity_module, "LATENCY_QUEUES_MAX", 2)
    throughput = QueueThroughput()
    throughput.sample(T0, [("a", 1, 0), ("b", 2, 0), ("c", 3, 0)])
    assert [row["queue"] for row in throughput.per_minute(T0, 8)] == ["b", "a"]
    later = T0 + 2 * RING_MINUTES * MINUTE_MS
    throughput.sample(later, [("a", 1, 0), ("b", 5, 1), ("c", 9, 0)])
    assert [(row["queue"], row["completed"], row["failed"])
            for row in throughput.per_minute(later, 8)] == [("b", 3, 1)]


def test_the_activity_op_splits_what_finished_by_queue():
    driver = Driver()
    driver.worker(tasks=("t",), capacity=10)
    for queue, n in (("mail", 3), ("reports", 1)):
        for _ in range(n):
            (execute,) = [e for e in driver.enqueue(queue=queue).effects
                          if isinstance(e, Execute)]
            driver.succeed(execute, {})
    (execute,) = [e for e in driver.enqueue(queue="reports", retries=0).effects
                  if isinstance(e, Execute)]
    driver.fail(execute)  # discarded: a failure

    def queue_throughput():
        return reply(driver.run(c.Admin("p", driver.rid(), "activity", {}))).fields[
            "queue_throughput"]

    rows = queue_throughput()
    assert [(row["queue"], row["completed"], row["failed"]) for row in rows] == [
        ("mail", 3, 0), ("reports", 1, 1)]
    assert rows[0]["completed_per_minute"][-1] == 3 and len(rows[0]["failed_per_minute"]) == 60
    driver.advance(MINUTE_MS)
    (execute,) = [e for e in driver.enqueue(queue="reports").effects if isinstance(e, Execute)]
    driver.succeed(execute, {})
    rows = {row["queue"]: row for row in queue_throughput()}
    assert rows["reports"]["completed_per_minute"][-2:] == [1, 1]
    assert rows["mail"]["completed_per_minute"][-2:] == [3, 0]

"""Each queue's latency per minute (``tay.engine.activity.QueueLatency``): samples against
a plain reference, the bound on queues, and the engine's ``activity`` op sampling its ready
heaps (a paused queue's job waits on; a dispatched one leaves the latency)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from tay.engine import EngineConfig, Execute
from tay.engine import activity as activity_module
from tay.engine import commands as c
from tay.engine.activity import MINUTE_MS, RING_MINUTES, QueueLatency
from tests.engine.conftest import T0, Driver, reply

samples = st.lists(st.tuples(st.integers(0, 3 * RING_MINUTES * MINUTE_MS // 1000),
                             st.lists(st.tuples(st.sampled_from("abcd"),
                                                st.integers(0, 10 ** 7)), max_size=4)),
                   max_size=40)


@settings(max_examples=200, deadline=None)
@given(samples)
def test_each_minute_keeps_the_largest_sample_of_the_last_hour(steps):
    latency, seen = QueueLatency(), {}
    now = T0
    for seconds, latencies in sorted(steps):
        now = T0 + seconds * 1000
        latency.sample(now, latencies)
        for queue, ms in latencies:
            key = (queue, now // MINUTE_MS)
            seen[key] = max(seen.get(key, 0), ms)
    current = now // MINUTE_MS
    minutes = range(current - RING_MINUTES + 1, current + 1)
    expected = []
    for queue in "abcd":
        values = [seen.get((queue, minute), 0) for minute in minutes]
        if max(values):
            expected.append({"queue": queue, "peak_ms": max(values), "per_minute": values})
    expected.sort(key=lambda row: (-row["peak_ms"], row["queue"]))
    assert latency.per_minute(now, 8) == expected
    assert latency.per_minute(now, 1) == expected[:1]


def test_queues_past_the_bound_are_not_recorded_and_old_ones_leave(monkeypatch):
    monkeypatch.setattr(activity_module, "LATENCY_QUEUES_MAX", 2)
    latency = QueueLatency()
    latency.sample(T0, [("a", 5), ("b", 6), ("c", 7)])
    assert [row["queue"] for row in latency.per_minute(T0, 8)] == ["b", "a"]
    later = T0 + RING_MINUTES * MINUTE_MS  # a and b are an hour old: trimmed, room for c
    latency.sample(later, [("c", 9)])
    assert [(row["queue"], row["peak_ms"]) for row in latency.per_minute(later, 8)] == [("c", 9)]


def test_the_activity_op_samples_the_waiting_queues():
    driver = Driver(EngineConfig(queues={"held": 1, "busy": 1}))
    driver.worker(tasks=("t",), capacity=4)
    driver.run(c.Admin("p", driver.rid(), "pause_queue", {"queue": "held"}))
    driver.enqueue(queue="held")
    started = [e for e in driver.enqueue(queue="busy").effects if isinstance(e, Execute)]
    assert len(started) == 1  # dispatched at once: nothing of "busy" waits
    driver.enqueue(queue="busy")  # its one credit is in use: this one waits
    driver.advance(90_000)

    def queue_latency():
        return reply(driver.run(c.Admin("p", driver.rid(), "activity", {}))).fields[
            "queue_latency"]

    rows = queue_latency()
    assert [(row["queue"], row["peak_ms"]) for row in rows] == [("busy", 90_000),
                                                                ("held", 90_000)]
    assert all(len(row["per_minute"]) == RING_MINUTES and row["per_minute"][-1] == 90_000
               for row in rows)
    driver.succeed(started[0], {})  # the waiting "busy" job starts: its latency stops
    driver.advance(MINUTE_MS)
    rows = {row["queue"]: row["per_minute"] for row in queue_latency()}
    assert rows["held"][-2:] == [90_000, 150_000] and rows["busy"][-2:] == [90_000, 0]
    driver.engine.sample_queues(driver.now + 5_000)  # the server's sample, between reads
    assert driver.engine.latency.per_minute(driver.now + 5_000, 8)[0]["peak_ms"] == 155_000

"""Finished jobs packed by a running server (tay.engine.retained.packed) read as they did unpacked.

Two Store-v2 engines get the same random commands and ticks; one packs the jobs that
finished (``pack_finished`` rounds with random slice sizes, at random points), the other
never does. After every step both must have produced the same records, effects and
replies, and hold the same jobs: every job's entry (a packed one as ``_finished_entry``
rebuilds it, without taking it out) and everything else in the engine, compared field by
field, with the jobs packed, the reads that take one out (a result, a status, the admin
job view, a retry, a cancel, an expiry), and the admin listing that reads them in place.
"""

from __future__ import annotations

import gc

from hypothesis import settings, strategies as st
from hypothesis.stateful import initialize, precondition, rule

from tay.engine import commands as c
from tay.engine.retained.jobs import JobEntry
from tay.engine.retained.packed import PACKED
from tests.engine.conftest import reply
from tests.engine.test_fused_commits import (
    QUEUES, TASKS, RoundTwinMachine, epoch_driver, snapshot,
)

_PACKING = ("jobs", "finished", "_finished_ids", "finishing", "_pack_round")


def every_job(engine) -> list:
    """Every job's entry image, by id: held ones as ``_finished_entry`` rebuilds them."""
    ids = set(engine.jobs) | set(engine.finished.stamps)
    return sorted((job_id, snapshot(engine.jobs.get(job_id)
                                    or engine._finished_entry(job_id))) for job_id in ids)


def engine_image(engine) -> tuple:
    image = snapshot(engine)
    for name in _PACKING:
        del image[1][name]
    return image, every_job(engine)


class PackingMachine(RoundTwinMachine):
    round_step = staticmethod(lambda engine, limit: engine.pack_finished(limit))
    image = staticmethod(engine_image)

    @initialize(seed=st.integers(0, 2**32), history=st.sampled_from(["none", "uncapped"]),
                slice_jobs=st.sampled_from([1, 2, 1000]))
    def start(self, seed, history, slice_jobs):
        # packed after every step, slice_jobs at a time
        self.packing = self.twins(seed, history, slice_jobs)
        self.packing.engine.start_packing()
        self.connect("w1", 3, {"a", "b"})  # jobs run (and finish) from the first step

    @rule(index=st.integers(0, 50), report=st.sampled_from(["nil", "nil", "value", "failed",
                                                            "twice"]))
    def report(self, index, report):
        reservation = self._reservation(index)
        if reservation is None:
            return
        ids = (reservation.reservation_id, reservation.execution_id)
        if report == "failed":
            self.both(c.Failed(reservation.conn, "f", *ids, {"type": "E", "message": "no"}))
        else:
            self.both(c.Succeeded(reservation.conn, "d", *ids,
                                  {"ok": [1, 2]} if report == "value" else None))
            if report == "twice":  # settled already (the job may be packed by now)
                self.both(c.Succeeded(reservation.conn, "d2", *ids, None))

    @rule(count=st.integers(1, 4), task=st.sampled_from(TASKS),
          result=st.sampled_from([None, {"ok": [1]}, {"b": 1, "a": "x"}, [1, 2.5], "text",
                                  {"n": {"deep": True}}]))
    def run_jobs(self, count, task, result):
        """Whole lifecycles: ``count`` jobs enqueued, then every running one succeeds."""
        for _ in range(count):
            self.enqueue(task, "q1", 0, None, False, False, {"k": None})
        for reservation in sorted(self.packing.engine.executors.reservations.values(),
                                  key=lambda r: r.reservation_id):
            self.both(c.Succeeded(reservation.conn, "d", reservation.reservation_id,
                                  reservation.execution_id, result))

    @precondition(lambda self: self.job_ids)
    @rule(index=st.integers(0, 200), read=st.sampled_from(["cancel", "result", "status",
                                                          "job", "retry_job", "cancel_job"]))
    def read(self, index, read):
        job_id = self.job_ids[index % len(self.job_ids)]
        if read in ("job", "retry_job", "cancel_job"):
            self.both(c.Admin("p", "a", read, {"job_id": job_id}))
        else:
            command = {"cancel": c.Cancel, "result": c.Result, "status": c.Status}[read]
            self.both(command("p", "r", job_id))

    @rule(state=st.sampled_from([None, "completed", "discarded", "cancelled", "available"]),
          queue=st.sampled_from([None, *QUEUES]), limit=st.sampled_from([1, 2, 50]))
    def listing(self, state, queue, limit):
        body = {"limit": limit, **({"state": state} if state else {}),
                **({"queue": queue} if queue else {})}
        self.both(c.Admin("p", "l", "jobs", body))

    @precondition(lambda self: self.job_ids)
    @rule(indexes=st.lists(st.integers(0, 200), min_size=1, max_size=8))
    def expire(self, indexes):
        """A compaction's expiry of several jobs at once (packed ones are dropped together,
        ``EngineState._drop_packed``), a job named twice included."""
        job_ids = [bytes.fromhex(self.job_ids[index % len(self.job_ids)]) for index in indexes]
        dropped = [driver.engine.expire(job_ids) for driver in (self.packing, self.plain)]
        assert dropped[0] == dropped[1]
        assert engine_image(self.packing.engine) == engine_image(self.plain.engine)

    @rule()
    def capture(self):
        """What an online compaction captures and decides is the same."""
        engines = (self.packing.engine, self.plain.engine)
        captured = [sorted(engine.retained_jobs()) for engine in engines]
        assert captured[0] == captured[1]
        assert engines[0].expirable(_Keep(), self.packing.now) \
            == engines[1].expirable(_Keep(), self.plain.now)
        # the retention trigger's oldest terminal job, whatever holds it (a packed job is
        # rebuilt by _finished_entry to be read here)
        entries = [engine.jobs.get(job_id) or engine._finished_entry(job_id)
                   for engine in engines for job_id in set(engine.jobs) | set(engine.finished.stamps)]
        finished = [entry.state.terminal_at for entry in entries
                    if not entry.volatile and entry.state.terminal]
        assert engines[0].oldest_terminal() == engines[1].oldest_terminal() \
            == min(finished, default=None)

    @rule(ms=st.sampled_from([0, 250, 1500, 6000]))
    def advance(self, ms):
        self.packing.advance(ms)
        self.plain.advance(ms)
        self.both(tick=True)


class _Keep:
    """A retention that expires jobs finished more than a second before ``at``."""

    duration_ms = 1000

    @staticmethod
    def expires(terminal_at, at):
        return terminal_at + 1000 <= at


PackingMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50,
                                            deadline=None)
TestPackedJobs = PackingMachine.TestCase


def finished_jobs(driver, count, result=None):
    driver.worker(conn="w1", tasks=("t",), capacity=count)
    ids = []
    for n in range(count):
        out = driver.enqueue(task="t", args={"n": n})
        (execute,) = [e for e in out.effects if type(e).__name__ == "Execute"]
        driver.succeed(execute, result=result)
        ids.append(execute.job_id)
    return ids


def test_a_round_packs_the_jobs_finished_before_the_last_round_ended():
    driver = epoch_driver(1, "none", True)
    engine = driver.engine
    engine.start_packing()
    first = finished_jobs(driver, 3)
    assert engine.pack_finished(10) is False  # the round that began packing: none yet
    assert len(engine.finished.packed) == 0
    second = finished_jobs(driver, 2)
    assert engine.pack_finished(2) is True  # the first three, two at a time
    assert engine.pack_finished(2) is False
    assert set(engine.finished.packed) == {bytes.fromhex(i) for i in first}
    assert engine.pack_finished(10) is False
    assert set(engine.finished.packed) == {bytes.fromhex(i) for i in first + second}
    assert engine.job_count() == 5 and len(engine.jobs) == 0


def test_packing_is_off_until_started():
    driver = epoch_driver(2, "none", True)
    finished_jobs(driver, 2)
    assert driver.engine.pack_finished(10) is False
    assert len(driver.engine.jobs) == 2 and not driver.engine.finished.packed


def test_a_packed_job_is_not_tracked_by_the_cycle_collector():
    """What packing is for: after one collection has seen them, packed jobs hold no object
    the collector tracks (a result that is a map of scalars included), where each job kept
    as its entry holds four. (The scalars tuple jobs share was made with the first of them,
    and a server's is long untracked: a collection before packing stands for that.)"""
    counts = {}
    for pack in (False, True):
        driver = epoch_driver(3, "none", True)
        engine = driver.engine
        engine.start_packing()
        finished_jobs(driver, 200, result={"rows": 3, "ok": True})
        gc.collect()
        if pack:
            engine.pack_finished(1000)
            engine.pack_finished(1000)
            assert len(engine.finished.packed) == 200
        gc.collect()
        jobs = list(engine.jobs.values()) + list(engine.finished.packed.values())
        counts[pack] = sum(gc.is_tracked(job) for job in jobs)
        if pack:
            for packed in engine.finished.packed.values():
                assert not any(gc.is_tracked(field) for field in packed)
    assert counts == {False: 200, True: 0}


def test_a_packed_job_taken_out_is_packed_again_by_a_later_round():
    driver = epoch_driver(4, "none", True)
    engine = driver.engine
    engine.start_packing()
    (job_id,) = finished_jobs(driver, 1, result=[1, 2])
    engine.pack_finished(10)
    engine.pack_finished(10)
    held = engine.finished.where(bytes.fromhex(job_id))
    assert held[0] is PACKED and held[0].state(held[1]) == "completed"
    result = reply(driver.run(c.Result("p", "r", job_id))).fields
    assert result["result"] == [1, 2]
    assert type(engine.jobs[bytes.fromhex(job_id)]) is JobEntry  # taken out to be read
    engine.pack_finished(10)
    assert bytes.fromhex(job_id) not in engine.finished.packed  # not before a round ends
    engine.pack_finished(10)
    assert bytes.fromhex(job_id) in engine.finished.packed


def test_volatile_jobs_expire_under_the_terminal_retention():
    """Volatile jobs are in no store, so no compaction expires them: ``expire_volatile``
    drops those finished long enough ago, oldest first, releasing their id and charge (the
    same id is a new job after), and keeps the rest, a retried one, and every one under
    an infinite retention."""
    from tay.storage.v2.manifest import INFINITY, Retention

    driver = epoch_driver(6, "none", True)
    engine = driver.engine
    driver.worker(conn="w1", tasks=("t",), capacity=4)
    empty = engine.budget.used

    def volatile_job(n, **options):
        out = driver.enqueue(task="t", args={"n": n}, durability="volatile", **options)
        (execute,) = [e for e in out.effects if type(e).__name__ == "Execute"]
        driver.succeed(execute)
        return execute.job_id

    first = volatile_job(1)
    driver.advance(30 * 60_000)
    second = volatile_job(2)
    kept = reply(driver.run(c.Enqueue("p", "k", "nobody", {"n": 3},
                                      {"durability": "volatile"})))  # no worker runs it
    hour = Retention("hours", 1)
    assert engine.expire_volatile(hour, driver.now) == 0
    assert engine.expire_volatile(INFINITY, driver.now + 10**9) == 0
    driver.advance(31 * 60_000)  # the first finished an hour ago, the second half an hour
    assert engine.expire_volatile(hour, driver.now) == 1
    assert bytes.fromhex(first) not in engine.jobs and bytes.fromhex(second) in engine.jobs
    (refused,) = driver.run(c.Status("p", "s", first)).effects
    assert refused.failure.wire_error()["code"] == "not_found"
    assert engine.counts["completed"] == 1 and engine.counts["available"] == 1
    driver.advance(60 * 60_000)
    assert engine.expire_volatile(hour, driver.now) == 1
    assert engine.job_count() == 1  # the waiting one stays, however old
    assert engine.budget.used == empty + engine.jobs[bytes.fromhex(
        kept.fields["job_id"])].charge
    assert engine.job_index.size(("state", "completed")) == 0
    again = volatile_job(9, id=first)  # the first job's id is free: a new job
    assert again == first and engine.job_count() == 2

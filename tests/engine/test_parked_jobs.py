"""Waiting jobs parked by a running server (tay.engine.retained.jobs.ParkedJobEntry) behave
as they did unparked.

Two Store-v2 engines get the same random commands and ticks; one parks the jobs that
began to wait (``park_waiting`` rounds with random slice sizes after every step), the
other never does. After every step both must have produced the same records, effects and
replies, and hold the same jobs, compared field by field (a parked job as the JobState its
tuple builds, read without unparking it), through dispatches, timers, failures and
retries, cancels, status and admin reads, listings, a compaction's capture, the triggers'
passes over the jobs, expiry, and its order shift.
"""

from __future__ import annotations

import gc

import orjson
from hypothesis import settings, strategies as st
from hypothesis.stateful import initialize, precondition, rule

from tay.engine import commands as c
from tay.engine.effects import Execute
from tay.engine.retained.jobs import STATE_SLOT, JobEntry, ParkedJobEntry
from tay.engine.retained.packed import parkable
from tests.engine.conftest import refusal, reply
from tests.engine.test_fused_commits import (
    CONNS, QUEUES, RoundTwinMachine, epoch_driver, snapshot,
)

_PARKING = ("jobs", "parking", "_park_round")


def engine_image(engine) -> tuple:
    image = snapshot(engine)
    for name in _PARKING:
        del image[1][name]
    return image, sorted((job_id, snapshot(entry)) for job_id, entry in engine.jobs.items())


def parked(engine) -> int:
    return sum(type(entry) is ParkedJobEntry for entry in engine.jobs.values())


def park_all(engine, limit=1000) -> None:
    """Two whole rounds: the first ends the round that was running, the second parks every
    job that waited when it began."""
    for _ in range(2):
        while engine.park_waiting(limit):
            pass


class ParkingMachine(RoundTwinMachine):
    round_step = staticmethod(lambda engine, limit: engine.park_waiting(limit))
    image = staticmethod(engine_image)

    @initialize(seed=st.integers(0, 2**32), history=st.sampled_from(["none", "uncapped"]),
                slice_jobs=st.sampled_from([1, 2, 1000]))
    def start(self, seed, history, slice_jobs):
        # parked after every step, slice_jobs at a time
        self.parking = self.twins(seed, history, slice_jobs)
        self.parking.engine.start_parking()

    @rule(index=st.integers(0, 50), report=st.sampled_from(["started", "nil", "value",
                                                            "failed", "failed"]))
    def report(self, index, report):
        reservation = self._reservation(index)
        if reservation is None:
            return
        ids = (reservation.reservation_id, reservation.execution_id)
        if report == "started":
            self.both(c.Started(reservation.conn, "s", *ids))
        elif report == "failed":  # retryable (waits for its backoff) or discarded
            self.both(c.Failed(reservation.conn, "f", *ids,
                               {"type": "E", "message": "no", "detail": {"n": [1]}}))
        else:
            self.both(c.Succeeded(reservation.conn, "d", *ids,
                                  {"ok": [1, 2]} if report == "value" else None))

    @precondition(lambda self: self.job_ids)
    @rule(index=st.integers(0, 200), read=st.sampled_from(["cancel", "result", "status", "job",
                                                          "retry_job", "cancel_job"]))
    def read(self, index, read):
        job_id = self.job_ids[index % len(self.job_ids)]
        if read in ("job", "retry_job", "cancel_job"):
            self.both(c.Admin("p", "a", read, {"job_id": job_id}))
        else:
            command = {"cancel": c.Cancel, "result": c.Result, "status": c.Status}[read]
            self.both(command("p", "r", job_id))

    @rule(state=st.sampled_from([None, "available", "scheduled", "retryable", "completed"]),
          queue=st.sampled_from([None, *QUEUES]), limit=st.sampled_from([1, 2, 50]))
    def listing(self, state, queue, limit):
        body = {"limit": limit, **({"state": state} if state else {}),
                **({"queue": queue} if queue else {})}
        self.both(c.Admin("p", "l", "jobs", body))

    @rule(queue=st.sampled_from(QUEUES), pause=st.booleans())
    def pause(self, queue, pause):
        self.both(c.Admin("p", "q", "pause_queue" if pause else "resume_queue",
                          {"queue": queue}))

    @rule()
    def capture(self):
        """What an online compaction captures and decides is the same, and capturing
        leaves parked jobs parked."""
        engines = (self.parking.engine, self.plain.engine)
        before = parked(engines[0])
        captured = [sorted(engine.retained_jobs()) for engine in engines]
        assert captured[0] == captured[1]
        assert engines[0].expirable(_Keep(), self.parking.now) \
            == engines[1].expirable(_Keep(), self.plain.now)
        assert engines[0].oldest_terminal() == engines[1].oldest_terminal()
        assert parked(engines[0]) == before
        assert engine_image(engines[0]) == engine_image(engines[1])

    @precondition(lambda self: self.job_ids)
    @rule(indexes=st.lists(st.integers(0, 200), min_size=1, max_size=4))
    def expire(self, indexes):
        job_ids = [bytes.fromhex(self.job_ids[index % len(self.job_ids)]) for index in indexes]
        dropped = [driver.engine.expire(job_ids) for driver in (self.parking, self.plain)]
        assert dropped[0] == dropped[1]
        assert engine_image(self.parking.engine) == engine_image(self.plain.engine)

    @rule(back=st.integers(0, 5), shift=st.integers(0, 3))
    def adopt(self, back, shift):
        """A published compaction's order shift: a parked job's order moves in its tuple,
        as an unparked one's does in its JobState."""
        for driver in (self.parking, self.plain):
            engine = driver.engine
            order_from = max(1, engine.epoch.next_order - back)
            engine.adopt_compaction([], order_from, min(shift, order_from - 1),
                                    engine.next_sequence)
        assert engine_image(self.parking.engine) == engine_image(self.plain.engine)

    @rule(ms=st.sampled_from([0, 250, 1500, 6000]))
    def advance(self, ms):
        self.parking.advance(ms)
        self.plain.advance(ms)
        self.both(tick=True)

    @rule(conn=st.sampled_from(CONNS), capacity=st.integers(1, 3))
    def worker(self, conn, capacity):
        """A worker for every task (the jobs that waited are dispatched)."""
        self.both(c.Connect(conn, "worker", f"rt-{conn}", capacity, None, "h"))
        self.both(c.RegisterTasks(conn, ("a", "b"), "rt"))


class _Keep:
    """A retention that expires jobs finished more than a second before ``at``."""

    duration_ms = 1000

    @staticmethod
    def expires(terminal_at, at):
        return terminal_at + 1000 <= at


ParkingMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50,
                                            deadline=None)
TestParkedJobs = ParkingMachine.TestCase


def waiting_jobs(driver, count, **options):
    return [driver.job_id(task="t", args={"n": n, "tags": ["x", n]}, **options)
            for n in range(count)]


def test_the_machine_parks_jobs():
    """The machine above compares something: its engine parks the jobs that wait."""
    driver = epoch_driver(1, "none", True)
    engine = driver.engine
    engine.start_parking()
    waiting_jobs(driver, 3)
    engine.park_waiting(1000)  # the round in progress ends: the next one takes the three
    assert parked(engine) == 0
    engine.park_waiting(1000)
    assert parked(engine) == 3


def test_a_parked_job_leaves_only_its_entry_to_the_cycle_collector():
    """What parking is for: after a collection has seen them, each waiting job is one
    object the collector tracks (its entry) instead of three (entry, JobState,
    LazyDefinition), its packed tuple untracked."""
    counts = {}
    for park in (False, True):
        driver = epoch_driver(2, "none", True)
        engine = driver.engine
        engine.start_parking()
        waiting_jobs(driver, 100)
        waiting_jobs(driver, 100, delay_ms=60_000)  # scheduled: waiting for a timer
        if park:
            park_all(engine)
            assert parked(engine) == 200
        engine.execute_args.__init__(engine._may_dispatch)  # its cache holds definitions
        gc.collect()
        tracked = 0
        for entry in engine.jobs.values():
            held = STATE_SLOT.__get__(entry)  # the JobState, or a parked job's tuple
            tracked += gc.is_tracked(entry) + gc.is_tracked(held)
            if type(held) is not tuple:
                tracked += gc.is_tracked(held.definition)
        counts[park] = tracked
    assert counts == {False: 600, True: 200}


def test_a_job_dispatched_within_a_round_is_never_parked():
    driver = epoch_driver(3, "none", True)
    engine = driver.engine
    engine.start_parking()
    engine.park_waiting(1000)  # the round that began parking ends
    (job_id,) = waiting_jobs(driver, 1)
    out = driver.worker(conn="w1", tasks=("t",), capacity=1)
    assert [e.job_id for e in out.effects if type(e) is Execute] == [job_id]
    park_all(engine)
    assert parked(engine) == 0


def parked_jobs(seed: int, count: int):
    """A driver whose engine parked ``count`` waiting jobs; (driver, their ids)."""
    driver = epoch_driver(seed, "none", True)
    driver.engine.start_parking()
    ids = waiting_jobs(driver, count)
    park_all(driver.engine)
    return driver, ids


def test_a_parked_job_dispatches_with_its_args_and_becomes_a_plain_entry():
    driver, ids = parked_jobs(4, 3)
    engine = driver.engine
    assert all(parkable(entry) is False for entry in engine.jobs.values())  # parked already
    out = driver.worker(conn="w1", tasks=("t",), capacity=3)
    executes = [e for e in out.effects if type(e) is Execute]
    assert [e.job_id for e in executes] == ids
    assert [orjson.loads(e.args_json) for e in executes] == [{"n": n, "tags": ["x", n]}
                                                              for n in range(3)]
    assert parked(engine) == 0
    driver.succeed(executes[0])
    assert driver.status(ids[0])["state"] == "completed"


def test_reads_leave_a_parked_job_parked_and_a_change_unparks_only_its_job():
    """A status, a result not ready, an admin job and a jobs page answer as for an unparked
    twin and leave every job parked; a cancel takes its job out of its tuple and no other."""
    driver, ids = parked_jobs(5, 3)
    twin = epoch_driver(5, "none", True)
    assert waiting_jobs(twin, 3) == ids
    engine = driver.engine

    def answers(d):
        def admin(op, body):
            return reply(d.run(c.Admin("p", d.rid(), op, body))).fields
        return (d.status(ids[1]),
                refusal(d.run(c.Result("p", d.rid(), ids[1]))),
                admin("job", {"job_id": ids[1]}),
                admin("jobs", {"state": "available"}))

    assert answers(driver) == answers(twin)
    assert parked(engine) == 3
    driver.run(c.Cancel("p", driver.rid(), ids[1]))
    assert type(engine.jobs[bytes.fromhex(ids[1])]) is JobEntry
    assert parked(engine) == 2
    assert driver.status(ids[1])["state"] == "cancelled"

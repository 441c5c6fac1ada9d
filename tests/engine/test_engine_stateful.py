"""Hypothesis state machine: random commands and ticks against a small model.

Checks invariants after every step (credits, capacities, reservations, terminal states
stay terminal, results as reported) and that replaying every emitted event into a fresh
Engine reproduces exactly the same durable state (the one apply path).
"""

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.engine.effects import Refuse, Reply
from tay.storage.events import encode_event
from tay.storage.events.transitions import STATES
from tests.engine.conftest import Driver

TASKS = ("a", "b", "c")
QUEUES = ("q1", "q2")
CONNS = ("w1", "w2", "w3")
TERMINAL = {"completed", "cancelled", "discarded"}


def answer(out):
    (effect,) = [e for e in out.effects if isinstance(e, (Reply, Refuse))]
    return effect


class EngineMachine(RuleBasedStateMachine):
    def make_driver(self, seed: int) -> Driver:
        return Driver(EngineConfig(queues={"q1": 2, "q2": 3}), seed=seed)

    @initialize(seed=st.integers(0, 2**32))
    def start(self, seed):
        self.driver = self.make_driver(seed)
        self.terminal: dict[str, str] = {}
        self.results: dict[str, object] = {}
        self.job_ids: list[str] = []
        self.deleted: set[str] = set()  # ids of jobs deleted (and not enqueued again)

    @rule(task=st.sampled_from(TASKS), queue=st.sampled_from(QUEUES), retries=st.integers(0, 2),
          delay_ms=st.sampled_from([None, 0, 300, 2000]), volatile=st.booleans(),
          timeout_ms=st.sampled_from([200, 5000]))
    def enqueue(self, task, queue, retries, delay_ms, volatile, timeout_ms):
        out = self.driver.enqueue(task=task, args={"n": len(self.job_ids)}, queue=queue,
                                  retries=retries, delay_ms=delay_ms, timeout_ms=timeout_ms,
                                  durability="volatile" if volatile else "persistent")
        reply = answer(out)
        assert isinstance(reply, Reply)
        self.job_ids.append(reply.fields["job_id"])
        inserted = [event for _, event in out.events if event.name == "job_inserted"]
        assert len(inserted) == (0 if volatile else 1)

    @rule(conn=st.sampled_from(CONNS), capacity=st.integers(1, 3),
          tasks=st.sets(st.sampled_from(TASKS), min_size=1))
    def connect(self, conn, capacity, tasks):
        if conn in self.driver.engine.executors.executors:
            return
        self.driver.worker(conn=conn, tasks=sorted(tasks), capacity=capacity)

    @rule(conn=st.sampled_from(CONNS))
    def disconnect(self, conn):
        self.driver.run(c.Disconnect(conn))

    def _pick_reservation(self, index):
        live = sorted(self.driver.engine.executors.reservations.values(), key=lambda r: r.reservation_id)
        return live[index % len(live)] if live else None

    @rule(index=st.integers(0, 50), value=st.one_of(st.none(), st.integers(-(2**63), 2**63), st.text(max_size=5)))
    def succeed(self, index, value):
        reservation = self._pick_reservation(index)
        if reservation is None:
            return
        out = self.driver.run(c.Succeeded(reservation.conn, "s", reservation.reservation_id,
                                          reservation.execution_id, value))
        assert answer(out).type == "accepted"
        job_id = reservation.job_id.hex()
        self.terminal[job_id] = "completed"
        self.results[job_id] = value
        # A second report for the same execution is accepted and changes nothing.
        again = self.driver.run(c.Failed(reservation.conn, "f", reservation.reservation_id,
                                         reservation.execution_id, {"type": "E"}))
        assert not again.events and answer(again).type == "accepted"

    @rule(index=st.integers(0, 50))
    def fail(self, index):
        reservation = self._pick_reservation(index)
        if reservation is None:
            return
        out = self.driver.run(c.Failed(reservation.conn, "f", reservation.reservation_id,
                                       reservation.execution_id, {"message": "no"}))
        assert answer(out).type == "accepted"

    @precondition(lambda self: self.job_ids)
    @rule(index=st.integers(0, 200))
    def cancel(self, index):
        job_id = self.job_ids[index % len(self.job_ids)]
        out = self.driver.run(c.Cancel("p", "x", job_id))
        expected = self.terminal.get(job_id)
        if job_id in self.deleted:
            assert answer(out).failure.code == "not_found"
        elif expected in ("completed", "discarded"):
            assert answer(out).failure.code == "cancel_rejected"
        else:
            assert answer(out).fields["status"] == "cancelled"
            self.terminal[job_id] = "cancelled"

    @precondition(lambda self: self.job_ids)
    @rule(index=st.integers(0, 200), again=st.booleans())
    def delete(self, index, again):
        """A finished job is deleted (its id is free: ``again`` enqueues a new job under
        it); any other is refused and stays."""
        job_id = self.job_ids[index % len(self.job_ids)]
        entry = self.driver.engine.jobs.get(bytes.fromhex(job_id))
        out = self.driver.run(c.Admin("p", "d", "delete_job", {"job_id": job_id}))
        if entry is None:
            assert answer(out).failure.code == "not_found"
            return
        if entry.state.state not in TERMINAL:
            assert answer(out).failure.code == "delete_rejected" and not out.events
            return
        assert answer(out).fields["deleted"] is True
        assert [event.name for _, event in out.events] == (
            [] if entry.volatile else ["job_deleted"])
        assert bytes.fromhex(job_id) not in self.driver.engine.jobs
        self.terminal.pop(job_id, None)
        self.results.pop(job_id, None)
        self.deleted.add(job_id)
        if again:
            reply = answer(self.driver.enqueue(task="a", args={"again": 1}, id=job_id))
            assert reply.fields["job_id"] == job_id
            self.deleted.discard(job_id)

    @rule(ms=st.integers(0, 3000))
    def advance(self, ms):
        self.driver.advance(ms)
        self.driver.tick()

    @rule(later_ms=st.integers(1, 120_000))
    def next_day(self, later_ms):
        """Into the next UTC day (the day history starts a new row)."""
        self.driver.advance(86_400_000 - self.driver.now % 86_400_000 + later_ms)
        self.driver.tick()

    @rule()
    def record_days(self):
        """The server's minute: a (32,2) for each day counted since its last one."""
        out = self.driver.run(c.Admin("p", "h", "record_days", {}))
        written = [event for _, event in out.events]
        assert answer(out).fields["recorded"] == len(written)
        assert self.driver.run(c.Admin("p", "h", "record_days", {})).events == []

    @invariant()
    def bookkeeping_is_consistent(self):
        if not hasattr(self, "driver"):
            return
        engine = self.driver.engine
        for job_id, entry in engine.jobs.items():
            state = entry.state.state
            hex_id = job_id.hex()
            if state in ("completed", "discarded"):
                self.terminal.setdefault(hex_id, state)
            if hex_id in self.terminal:
                assert state == self.terminal[hex_id], (hex_id, state)
            if hex_id in self.results:
                assert entry.state.result_present and entry.state.result == self.results[hex_id]
            live = entry.reservation_id in engine.executors.reservations
            assert live == (state == "executing")
        for queue, credits in (("q1", 2), ("q2", 3)):
            assert engine._executing[queue] <= credits
            executing = sum(1 for e in engine.jobs.values()
                            if e.queue == queue and e.state.state == "executing")
            assert executing == engine._executing[queue]
        for executor in engine.executors.executors.values():
            assert len(executor.reservations) <= executor.capacity
        # the per-state counts (the queue rows' sums) are the jobs in each state, per queue
        by_queue: dict[tuple[str, str], int] = {}
        for entry in engine.jobs.values():
            key = (entry.queue, entry.state.state)
            by_queue[key] = by_queue.get(key, 0) + 1
        assert {(queue, state): count for queue, row in engine.queue_counts.items()
                for state, count in zip(STATES, row) if count} == by_queue
        assert dict(engine.counts) == {state: sum(n for (_, s), n in by_queue.items() if s == state)
                                       for state in STATES}
        # an engine that lived from the start: each day's totals are what it counted
        assert engine.day_history.totals(engine.activity.days()) == {
            day: tuple(counts) for day, counts in engine.activity.days().items()}

    def teardown(self):
        if not hasattr(self, "driver"):
            return
        fresh = Driver(EngineConfig(queues={"q1": 2, "q2": 3}))
        for sequence, event in self.driver.journal:
            fresh.engine.replay(sequence, event.type, event.schema, encode_event(event))
        durable = {k: e.state for k, e in self.driver.engine.jobs.items() if not e.volatile}
        replayed = {k: e.state for k, e in fresh.engine.jobs.items()}
        assert replayed == durable
        assert fresh.engine.next_sequence == self.driver.engine.next_sequence
        assert fresh.engine.day_history.recorded == self.driver.engine.day_history.recorded


EngineMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestEngineStateful = EngineMachine.TestCase

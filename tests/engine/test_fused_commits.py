"""The fused per-job commits (insert, start, nil-result success) equal the general path.

Two Store-v2 engines get the same random commands and ticks: one commits through the fused
functions (``EpochEngine._insert_fused``, ``_start_fused``, ``_succeed_fused``), the other
with ``fused = False``, through event builders, ``_commit_in_epoch``, the reducer, ``apply``
and ``_install`` (the path replay takes). After every step both must have produced the same
records (sequence, pair, name, payload and bytes), the same effects and replies, and the
same engine state, compared field by field over the whole object graph (jobs and their
entries, counts, indexes, heaps, budgets, the reducer's allocator, executors, activity, the
random source). History budgets: none, uncapped, and capped tight enough to refuse starts.
"""

from __future__ import annotations

import random
import types
from collections import deque
from functools import partial
from typing import Any

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from tay.engine import EngineConfig
from tay.engine import commands as c
from tay.engine.effects import Refuse
from tay.engine.retained.jobs import JobEntry, peek, timeline
from tay.storage.events.definition import LazyDefinition
from tay.storage.events.transitions import JobState
from tay.storage.journal.history_budget import HistoryBudget
from tests.engine.conftest import Driver, reply

TASKS = ("a", "b")
QUEUES = ("q1", "q2")
CONNS = ("w1", "w2")
HEADER = 44  # an empty active segment
_CALLABLES = (types.MethodType, types.FunctionType, types.BuiltinFunctionType,
              types.BuiltinMethodType, partial)


def snapshot(obj, path=()):
    """A comparable image of ``obj`` and everything it holds (callables left out)."""
    if obj is None or type(obj) in (bool, int, float, str, bytes):
        return obj
    if isinstance(obj, _CALLABLES) or isinstance(obj, type):
        return "<callable>"
    if id(obj) in path:
        return "<cycle>"
    path = path + (id(obj),)
    if isinstance(obj, random.Random):
        return ("Random", obj.getstate())
    if isinstance(obj, LazyDefinition):  # its decoded args are a cache, not state
        return ("LazyDefinition", obj.canonical, obj.args_nodes, snapshot(obj.scalars, path))
    if isinstance(obj, (dict, types.MappingProxyType)):
        return (type(obj).__name__, [(snapshot(k, path), snapshot(v, path))
                                     for k, v in obj.items()])
    if isinstance(obj, (list, tuple, deque)):
        return (type(obj).__name__, [snapshot(item, path) for item in obj])
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, sorted(repr(snapshot(item, path)) for item in obj))
    fields = {}
    if isinstance(obj, JobEntry):
        # a row-backed entry (a fused start's or success's row) compares as the JobState its
        # row builds, read without the ``state`` read that would make it a plain entry
        row = peek(obj)
        fields["state"] = snapshot(row if isinstance(row, JobState) else row.job_state(), path)
        # and its attempt timeline as read (a first attempt's is the row's, not a slot's)
        fields["attempts"] = snapshot(timeline(obj), path)
        name = "JobEntry"
    else:
        name = type(obj).__name__
    for klass in type(obj).__mro__:
        for slot in klass.__dict__.get("__slots__", ()):
            if slot not in fields and hasattr(obj, slot):
                fields[slot] = snapshot(getattr(obj, slot), path)
    for key, item in getattr(obj, "__dict__", {}).items():
        fields[key] = snapshot(item, path)
    return (name, fields)


def records(out):
    return [(sequence, event.type, event.schema, event.name, dict(event.payload), event.raw)
            for sequence, event in out.events]


def effects(out):
    return [("refuse", e.conn, e.request_id, e.failure.wire_error()) if isinstance(e, Refuse)
            else (type(e).__name__, tuple(e)) for e in out.effects]


def epoch_driver(seed: int, history: str, fused: bool) -> Driver:
    config = EngineConfig(queues={"q1": 2, "q2": 1}, max_history_bytes=(
        6_000 + HistoryBudget(EngineConfig().history_caps, 1, history_bytes=HEADER, segments=1,
                              active_size=HEADER).reserve_bytes * 2
        if history == "capped" else None))
    driver = Driver(config, seed=seed)
    engine = driver.engine
    engine.fused = fused
    reducer = engine.new_epoch_reducer()
    reducer.end_base()
    engine.attach_epoch(reducer, 1)
    if history != "none":
        engine.attach_history(HistoryBudget(config.history_caps, 4096, history_bytes=HEADER,
                                            segments=1, active_size=HEADER))
    return driver


class TwinMachine(RuleBasedStateMachine):
    """Two engines given the same commands (``both``, a subclass's: it runs one on each and
    compares them): the enqueue and connection rules the twin machines share."""

    job_ids: list[str]
    sequence: int
    subject: Any  # the driver of the engine under test (the other one is its reference)

    def both(self, command=None, tick=False):
        raise NotImplementedError

    def _reservation(self, index):
        """One of the subject's live reservations, picked by ``index`` (None: none)."""
        live = sorted(self.subject.engine.executors.reservations.values(),
                      key=lambda r: r.reservation_id)
        return live[index % len(live)] if live else None

    @rule(task=st.sampled_from(TASKS), queue=st.sampled_from(QUEUES), retries=st.integers(0, 2),
          delay_ms=st.sampled_from([None, 0, 300]), volatile=st.booleans(),
          again=st.booleans(), args=st.sampled_from([{}, {"b": 1, "a": [1, "x"]}, {"k": None}]))
    def enqueue(self, task, queue, retries, delay_ms, volatile, again, args):
        options = {"queue": queue, "retries": retries, "delay_ms": delay_ms,
                   "durability": "volatile" if volatile else "persistent"}
        if again and self.job_ids:  # the same id again: idempotent, or a conflict
            options["id"] = self.job_ids[-1]
        self.sequence += 1
        out = self.both(c.Enqueue("p", f"e{self.sequence}", task, dict(args), options))
        for effect in out.effects:
            if type(effect).__name__ == "Reply" and effect.type == "enqueued":
                self.job_ids.append(effect.fields["job_id"])

    @rule(conn=st.sampled_from(CONNS), capacity=st.integers(1, 3),
          tasks=st.sets(st.sampled_from(TASKS), min_size=1))
    def connect(self, conn, capacity, tasks):
        self.both(c.Connect(conn, "worker", f"rt-{conn}", capacity, None, "h"))
        self.both(c.RegisterTasks(conn, tuple(sorted(tasks)), "rt"))

    @rule(conn=st.sampled_from(CONNS))
    def disconnect(self, conn):
        self.both(c.Disconnect(conn))


class RoundTwinMachine(TwinMachine):
    """Twin engines whose subject runs one of a server's rounds (``round_step``: packing or
    parking, ``slice_jobs`` at a time) after every command and at random points; after
    each, both must have made the same records and effects and hold what ``image`` reads
    alike."""

    slice_jobs: int
    plain: Any

    @staticmethod
    def round_step(engine, limit: int) -> bool:
        raise NotImplementedError

    @staticmethod
    def image(engine) -> tuple:
        raise NotImplementedError

    def twins(self, seed, history, slice_jobs):
        """The subject's driver and the plain one, from one seed and history."""
        self.slice_jobs = slice_jobs
        self.subject = epoch_driver(seed, history, True)
        self.plain = epoch_driver(seed, history, True)
        self.job_ids = []
        self.sequence = 0
        return self.subject

    def both(self, command=None, tick=False):
        subject, plain = [driver.tick() if tick else driver.run(command)
                          for driver in (self.subject, self.plain)]
        self.round_step(self.subject.engine, self.slice_jobs)
        assert records(subject) == records(plain)
        assert effects(subject) == effects(plain)
        for driver in (self.subject, self.plain):
            if driver.engine.history is not None:
                driver.engine.history.place()
        assert self.image(self.subject.engine) == self.image(self.plain.engine)
        return subject

    @rule(limit=st.sampled_from([1, 3, 1000]), rounds=st.integers(1, 3))
    def whole_rounds(self, limit, rounds):
        engine = self.subject.engine
        for _ in range(rounds):
            while self.round_step(engine, limit):
                pass
        assert self.image(engine) == self.image(self.plain.engine)



class FusedMachine(TwinMachine):
    @initialize(seed=st.integers(0, 2**32), history=st.sampled_from(["none", "uncapped",
                                                                      "capped"]))
    def start(self, seed, history):
        self.fused = self.subject = epoch_driver(seed, history, True)
        self.general = epoch_driver(seed, history, False)
        self.job_ids: list[str] = []
        self.sequence = 0

    def both(self, command=None, tick=False):
        outs = []
        for driver in (self.fused, self.general):
            outs.append(driver.tick() if tick else driver.run(command))
        fused, general = outs
        assert records(fused) == records(general)
        assert effects(fused) == effects(general)
        for driver in (self.fused, self.general):
            if driver.engine.history is not None:  # frames the fused commits left unplaced
                driver.engine.history.place()
        images = [snapshot(driver.engine) for driver in (self.fused, self.general)]
        for image in images:
            del image[1]["fused"]  # the one intended difference
        assert images[0] == images[1]
        return fused

    @rule(index=st.integers(0, 50), report=st.sampled_from(["started", "nil", "nil", "value",
                                                            "failed", "twice", "stranger"]))
    def report(self, index, report):
        reservation = self._reservation(index)
        if reservation is None:
            return
        ids = (reservation.reservation_id, reservation.execution_id)
        if report == "started":
            self.both(c.Started(reservation.conn, "s", *ids))
        elif report == "failed":
            self.both(c.Failed(reservation.conn, "f", *ids, {"type": "E", "message": "no"}))
        elif report == "stranger":  # another connection's report: refused, nothing changes
            other = next(conn for conn in CONNS if conn != reservation.conn)
            self.both(c.Succeeded(other, "x", *ids, None))
        else:
            self.both(c.Succeeded(reservation.conn, "d", *ids,
                                  {"ok": [1, 2]} if report == "value" else None))
            if report == "twice":  # settled already: accepted, nothing changes
                self.both(c.Succeeded(reservation.conn, "d2", *ids, None))

    @precondition(lambda self: self.job_ids)
    @rule(index=st.integers(0, 200))
    def cancel(self, index):
        self.both(c.Cancel("p", "x", self.job_ids[index % len(self.job_ids)]))

    @rule(ms=st.sampled_from([0, 1, 250, 1500, 6000]))
    def advance(self, ms):
        self.fused.advance(ms)
        self.general.advance(ms)
        self.both(tick=True)


FusedMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=50,
                                          deadline=None)
TestFusedCommits = FusedMachine.TestCase


def test_the_fused_path_is_taken():
    """The machine above compares something: the reference profile's three commits take the
    fused functions (a spy on each), and the general engine takes none of them."""
    for fused in (True, False):
        driver = epoch_driver(3, "uncapped", fused)
        engine = driver.engine
        calls = []
        for name in ("_insert_fused", "_start_fused", "_succeed_fused"):
            method = getattr(engine, name)
            setattr(engine, name, lambda *a, _m=method, _n=name: calls.append(_n) or _m(*a))
        driver.worker(conn="w1", tasks=("t",))
        out = driver.enqueue(task="t", args={"n": 1})
        (execute,) = [e for e in out.effects if type(e).__name__ == "Execute"]
        out = driver.succeed(execute)
        assert [event.name for _, event in out.events] == ["result_recorded", "job_finished"]
        assert calls == (["_insert_fused", "_start_fused", "_succeed_fused"] if fused else [])


def test_a_first_attempt_kept_as_a_row_reads_as_its_timeline():
    """A fused start and success leave a first attempt's timeline in their rows, not in
    ``attempts``: read through ``timeline``, the admin job view, or once the JobState is
    built, it is the attempt's start and finish times, the same as the general path's."""
    views = []
    for fused in (True, False):
        driver = epoch_driver(5, "none", fused)
        driver.worker(conn="w1", tasks=("t",))
        out = driver.enqueue(task="t", args={})
        (execute,) = [e for e in out.effects if type(e).__name__ == "Execute"]
        started_at = driver.now
        driver.advance(700)
        (entry,) = driver.engine.jobs.values()
        assert timeline(entry) == ((1, started_at, None, None),)
        driver.succeed(execute)
        expected = ((1, started_at, started_at + 700, "completed"),)
        assert timeline(entry) == expected
        if fused:  # still the row: nothing built the JobState
            assert type(peek(entry)).__name__ == "CompletedRow" and entry.attempts is None
        view = reply(driver.run(c.Admin("p", driver.rid(), "job",
                                        {"job_id": execute.job_id}))).fields["job"]["attempts"]
        assert entry.attempts == expected  # the JobState built: the slot holds it
        views.append(view)
    assert views[0] == views[1] == [{"attempt": 1, "started_at": started_at,
                                     "finished_at": started_at + 700, "outcome": "completed"}]

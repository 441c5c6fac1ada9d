"""The engine: a synchronous, I/O-free job state machine driven by commands and time.

``handle(command, now_ms, mono_ms)`` and ``tick(now_ms, mono_ms)`` return an ``Outcome``:
events to append (in order) and effects to release after those events are durable.
``replay`` / ``consume_event`` are the recovery consumer and ``finish_recovery`` settles executions that were
running at shutdown. ``now_ms`` is wall-clock Unix milliseconds (stored in events,
scheduled times); ``mono_ms`` is a monotonic clock (execution timeouts).
"""

from __future__ import annotations

from heapq import heappop
from typing import Any, Callable

from tay.engine import commands as cmd
from tay.engine.effects import CancelExecution, Outcome, Refuse
from tay.engine.validation.ids import random_token
from tay.engine.retained.jobs import peek, public_job
from tay.engine.state import finish_outcome
from tay.engine.handlers.admin import AdminCommands
from tay.engine.epoch import EpochEngine
from tay.engine.schedules.table import ScheduleState
from tay.engine.handlers.workers import WorkerCommands
from tay.failures import RecoveryRefused, RequestRefused
from tay.storage import events as ev
from tay.storage.journal.history_budget import HistoryBudget
from tay.storage.events.operations import CONTROL_PAIRS
from tay.storage.events.schedules import SCHEDULE_PAIRS
from tay.storage.events.transitions import JOB_PAIRS
from tay.storage.events.transitions import JobState, apply
from tay.storage.formats.value import DecodeLimits
from tay.storage.v2.rows import BaseReadFailed

__all__ = ["Engine"]

_REPLAY_LIMITS = DecodeLimits()
_new_object = object.__new__
HISTORY_RETRY_MS = 1_000  # a due job the history caps hold back is looked at again after this


def _not_increasing(sequence: int, next_sequence: int) -> RecoveryRefused:
    return RecoveryRefused("consumer_rejected", "sequence_not_increasing", sequence=sequence,
                           next_sequence=next_sequence)


class Engine(EpochEngine):
    """See docs/engine.md for the command/outcome model and the durability contract."""

    def handle(self, command: Any, now_ms: int, mono_ms: int) -> Outcome:
        """Run one command; a refusal becomes a ``Refuse`` effect and changes nothing."""
        self._clock_offset = now_ms - mono_ms
        handler = self._HANDLERS.get(type(command))
        if handler is None:
            raise TypeError(f"not an engine command: {type(command).__name__}")
        out = _new_object(Outcome)  # Outcome(), without its Python-level __init__
        out.events = []
        out.effects = []
        try:
            handler(self, command, now_ms, mono_ms, out)
        except RequestRefused as refusal:
            if out.events:  # a refusal must come before any mutation: an engine bug
                raise RuntimeError("refusal after a mutation") from refusal
            out.effects = [Refuse(getattr(command, "conn", None),
                                  getattr(command, "request_id", None), refusal)]
        except BaseReadFailed as failure:  # a held job's bytes (read before any mutation)
            if out.events:
                raise RuntimeError("a base read after a mutation") from failure
            out.effects = [Refuse(getattr(command, "conn", None),
                                  getattr(command, "request_id", None),
                                  RequestRefused(f"the store could not be read: {failure}",
                                                 code="unavailable"))]
        return out

    _HANDLERS: dict[type, Callable] = {
        cmd.Connect: WorkerCommands._connect,
        cmd.Disconnect: WorkerCommands._disconnect,
        cmd.RegisterTasks: WorkerCommands._register,
        cmd.UnregisterTasks: WorkerCommands._unregister,
        cmd.Enqueue: WorkerCommands._enqueue,
        cmd.DecodedEnqueue: WorkerCommands._enqueue,
        cmd.PlainEnqueue: WorkerCommands._enqueue,
        cmd.Status: WorkerCommands._status,
        cmd.Result: WorkerCommands._result,
        cmd.Cancel: WorkerCommands._cancel,
        cmd.Started: WorkerCommands._started,
        cmd.Succeeded: WorkerCommands._succeeded,
        cmd.Failed: WorkerCommands._failed,
        **AdminCommands._SCHEDULE_HANDLERS,
        cmd.Admin: AdminCommands._admin,
    }

    def tick(self, now_ms: int, mono_ms: int) -> Outcome:
        """Promote due jobs, time out executions, deliver due schedule occurrences, dispatch."""
        self._clock_offset = now_ms - mono_ms
        out = Outcome()
        for _, _, key in self._timers.pop_due(now_ms):
            entry = self.jobs[key[0]]
            job = entry.state
            try:
                self._commit(entry, ev.job_available(job.id, now_ms, job.revision, job.eligible_at),
                             entry.volatile, out)
            except RequestRefused:  # history caps: it stays waiting; look again later
                self._timers.push(now_ms + HISTORY_RETRY_MS, key)
        for _, _, reservation_id in self._timeouts.pop_due(mono_ms):
            reservation = self.executors.reservations[reservation_id]
            entry = self.jobs[reservation.job_id]
            self._release(reservation)
            out.effects.append(CancelExecution(reservation.conn, random_token(self.rng),
                                               reservation.reservation_id, reservation.execution_id))
            self._finish(entry, ev.TIMEOUT, ev.DIAG_TIMEOUT, now_ms, out)
            job = entry.state
            self.activity.failure(now_ms, job.id, entry.queue, entry.task, job.attempt,
                                  finish_outcome(job), None)
        self._deliver_schedules(now_ms, out)
        self._dispatch(now_ms, mono_ms, out)
        return out

    def next_wakeup(self) -> int | None:
        """The monotonic time at which ``tick`` must next run (None: nothing pending).

        Wall-clock due times are mapped with the clock offset seen at the last call.
        """
        # the driver asks after every command: ``_timeouts.peek_due`` in place (a head is
        # live while its reservation is, ``_timeout_live``): stale heads (settled
        # executions) are dropped here, about one per job, without two calls each
        heap = self._timeouts._heap
        reservations = self.executors.reservations
        while heap and heap[0][2] not in reservations:
            heappop(heap)
        wake = heap[0][0] if heap else None
        timers = self._timers
        due_wall = timers.peek_due() if timers._heap else None  # most often none: no call
        if due_wall is not None and (wake is None or due_wall - self._clock_offset < wake):
            wake = due_wall - self._clock_offset
        schedules = self.schedules
        schedule_wall = schedules.next_wakeup() if schedules._wake_heap else None
        if schedule_wall is not None and (wake is None
                                          or schedule_wall - self._clock_offset < wake):
            wake = schedule_wall - self._clock_offset
        rate_wake = self.rates.wake  # a queue its rate limit holds back (monotonic)
        if rate_wake is not None and (wake is None or rate_wake < wake):
            wake = rate_wake
        return wake

    # ---- recovery -----------------------------------------------------------------

    limits: DecodeLimits = _REPLAY_LIMITS  # Value budgets for replayed payloads

    def replay(self, sequence: int, event_type: int, schema: int,
               payload: bytes | memoryview) -> JobState | ScheduleState | None:
        """Recovery consumer, one record at a time: decode, then ``consume_event``."""
        if sequence < self.next_sequence:  # checked before decoding, as consume_event does
            raise _not_increasing(sequence, self.next_sequence)
        return self.consume_event(sequence, ev.decode_event(event_type, schema, payload,
                                                            self.limits))

    def consume_event(self, sequence: int, event: ev.Event) -> JobState | ScheduleState | None:
        """Recovery consumer for decoded events (recovery's batch path): apply like a live one.

        Job, schedule and control (queue, schedule pause) events share the one sequence counter.
        """
        if sequence < self.next_sequence:
            raise _not_increasing(sequence, self.next_sequence)
        pair = (event.type, event.schema)
        if pair not in JOB_PAIRS:
            if pair in CONTROL_PAIRS:
                self._apply_control(event)
                self.next_sequence = sequence + 1
                return None
            if pair not in SCHEDULE_PAIRS:
                raise RecoveryRefused("unsupported_semantics", "not_a_job_event",
                                      sequence=sequence, event_type=event.type,
                                      schema=event.schema)
            schedule = self._apply_schedule(sequence, event)
            self.next_sequence = sequence + 1
            return schedule
        entry = self.jobs.get(event.payload["job_id"])
        state = apply(entry.state if entry is not None else None, sequence, event)
        self.next_sequence = sequence + 1
        entry = self._install_or_drop(entry, state, event, False, None, event.payload["at"])
        return None if entry is None else entry.state

    def attach_history(self, budget: HistoryBudget) -> None:
        """Enforce the history caps from now on (the server, right after recovery).

        ``budget`` is ``HistoryBudget.for_journal(journal, config.history_caps)``, built at
        the journal's tail before ``finish_recovery``, so every event emitted afterwards is
        admitted (inserts, starts) or accounted (everything else).
        """
        self.history = budget

    def finish_recovery(self, now_ms: int, mono_ms: int) -> Outcome:
        """Check the state budget, settle jobs left executing as interrupted (diag 7), and
        seed the rate-limited queues' logs with their recent starts."""
        self.budget.check_recovered()
        self._clock_offset = now_ms - mono_ms
        out = Outcome()
        # in stamp order (the order they started), whatever order the table holds them in
        executing = sorted((e for e in self.jobs.values() if peek(e).state == "executing"),
                           key=lambda e: e.stamp)
        for entry in executing:
            self._finish(entry, ev.INTERRUPTED, ev.DIAG_INTERRUPTED, now_ms, out)
        self.seed_rate_logs(now_ms)
        # a link kept for a job that never came (a delivery of an id no record inserts)
        links = self.schedule_links
        for job_id in [job_id for job_id in links if job_id not in self._finished_ids]:
            del links[job_id]
        return out

    # ---- read helpers for the server and the schedules component ------------------------

    def lookup(self, job_id: bytes) -> str | None:
        """A job's state name for schedules (busy until its execution is settled here)."""
        return self.schedule_job_state(job_id)

    def job(self, job_id: bytes) -> JobState | None:
        entry = self._entry(job_id)
        return entry.state if entry is not None else None

    def job_view(self, job_id: bytes) -> dict[str, Any] | None:
        entry = self._entry(job_id)
        return public_job(entry) if entry is not None else None

    def state_counts(self) -> dict[str, int]:
        return {state: count for state, count in self.counts.items() if count}

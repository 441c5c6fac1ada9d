"""The one job transition function, shared by the live engine and replay (storage.md §6.3-6.4).

``apply(previous, sequence, event)`` takes the durable state of one job (or ``None`` when
the job does not exist yet), the record sequence S the event has (or will have) in the
journal, and a validated job event; it returns the next state or raises
``TransitionRejected`` (class ``consumer_rejected``) naming the job, S and the guard that
failed. It is pure: no clock, no I/O, and the previous state is never modified.

Every accepted event sets ``revision := S`` and needs ``expected_revision == P.revision``
and ``expected_revision < S``. Retry due times are *checked* against the window of
``retry_window`` (never re-drawn), so replay accepts exactly what the engine wrote.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.definition import TIME_MAX, U64_MAX, canonical_bytes

STATES = ("scheduled", "available", "executing", "retryable", "completed", "cancelled",
          "discarded")
TERMINAL_STATES = frozenset({"completed", "cancelled", "discarded"})
CANCELLABLE_STATES = frozenset({"available", "scheduled", "retryable", "executing"})
RETRY_CAP_MS = 60_000
RETRY_BASE_MS = 1000


class TransitionRejected(RecoveryRefused):
    """An event does not apply to the job's durable state (class ``consumer_rejected``)."""

    def __init__(
        self, guard: str, *, job_id: bytes | None, sequence: int, detail: str = ""
    ) -> None:
        super().__init__(
            "consumer_rejected", guard, sequence=sequence,
            job_id=job_id.hex() if job_id is not None else None, detail=detail,
        )
        self.guard = guard
        self.job_id = job_id
        job = job_id.hex() if job_id is not None else "?"
        self.message = f"consumer_rejected: {guard} (job {job}, sequence {sequence})" + (
            f": {detail}" if detail else "")
        self.args = (self.message,)


@dataclass(frozen=True, slots=True)
class JobState:
    """The durable state of one job after the event with sequence ``revision``."""

    id: bytes
    definition: Mapping[str, Any]
    definition_bytes: bytes
    state: str
    revision: int
    attempt: int
    next_attempt: int | None
    cycle: int
    execution: int | None
    eligible_at: int | None
    ready_order: int | None
    inserted_at: int
    attempted_at: int | None = None
    completed_at: int | None = None
    terminal_at: int | None = None
    diagnostic: Mapping[str, int] | None = None
    result_present: bool = False
    result: Any = None

    @property
    def max_attempts(self) -> int:
        return self.definition["max_attempts"]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def retry_window(attempt: int) -> tuple[int, int]:
    """(min_delay, max_delay) in ms after a failure of attempt ``attempt`` (>= 1)."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    delay = RETRY_CAP_MS if attempt >= 7 else RETRY_BASE_MS << (attempt - 1)
    jitter = min(delay // 4, RETRY_CAP_MS - delay)
    return delay, delay + jitter


def retry_due_range(attempt: int, at: int) -> tuple[int, int]:
    """The inclusive range next_due_at must fall in, saturating at 2^63-1."""
    low, high = retry_window(attempt)
    return min(TIME_MAX, at + low), min(TIME_MAX, at + high)


def expected_finish(outcome: int, attempt: int, max_attempts: int) -> tuple[int, int | None]:
    """The (disposition, next_attempt) a finish with ``outcome`` must carry (§6.4)."""
    if outcome == ev.SUCCESS:
        return ev.COMPLETED, None
    if outcome == ev.INTERRUPTED:
        return ev.RETRYABLE, attempt
    if attempt < max_attempts:
        return ev.RETRYABLE, attempt + 1
    return ev.DISCARDED, None


class _Guard:
    """Raises ``TransitionRejected`` for one (job, sequence) with a named guard."""

    def __init__(self, job_id: bytes | None, sequence: int) -> None:
        self.job_id, self.sequence = job_id, sequence

    def require(self, condition: bool, guard: str, detail: str = "", *values: Any) -> None:
        """``detail`` is a ``str.format`` template, filled only on failure (replay is hot)."""
        if not condition:
            raise TransitionRejected(guard, job_id=self.job_id, sequence=self.sequence,
                                     detail=detail.format(*values))


def apply(previous: JobState | None, sequence: int, event: ev.Event) -> JobState:
    """The next durable state of the job ``event`` names, or ``TransitionRejected``."""
    guard = _Guard(event.job_id, sequence)
    guard.require(event.is_job_event, "not_a_job_event", "pair {}", event.pair)
    guard.require(type(sequence) is int and 1 <= sequence <= U64_MAX, "invalid_sequence")
    guard.require(event.expected_revision < sequence, "expected_revision_not_below_sequence",
                  "expected_revision {}", event.expected_revision)
    if event.pair == ev.JOB_INSERTED:
        guard.require(previous is None, "job_already_exists")
        return _inserted(sequence, event)
    guard.require(previous is not None, "job_absent")
    assert previous is not None
    guard.require(previous.id == event.job_id, "job_id_mismatch")
    guard.require(previous.revision == event.expected_revision, "revision_mismatch",
                  "expected_revision {}, job revision {}", event.expected_revision,
                  previous.revision)
    return _HANDLERS[event.pair](previous, sequence, event, guard)


def _inserted(sequence: int, event: ev.Event) -> JobState:
    definition = event["definition"]
    eligible_at = event["eligible_at"]
    available = eligible_at <= event.at
    return JobState(
        id=event.job_id, definition=definition, definition_bytes=canonical_bytes(definition),
        state="available" if available else "scheduled", revision=sequence, attempt=0,
        next_attempt=1, cycle=sequence, execution=None, eligible_at=eligible_at,
        ready_order=sequence if available else None, inserted_at=event.at,
    )


def _available(job: JobState, sequence: int, event: ev.Event, guard: _Guard) -> JobState:
    guard.require(job.state in ("scheduled", "retryable"), "available_from_wrong_state",
                  job.state)
    guard.require(job.eligible_at == event["due_at"], "due_at_mismatch",
                  "due_at {}, eligible_at {}", event['due_at'], job.eligible_at)
    return replace(job, state="available", revision=sequence, eligible_at=event["due_at"],
                   ready_order=sequence)


def _started(job: JobState, sequence: int, event: ev.Event, guard: _Guard) -> JobState:
    guard.require(job.state == "available", "start_from_wrong_state", job.state)
    guard.require(event["attempt"] == job.next_attempt, "attempt_mismatch",
                  "attempt {}, next_attempt {}", event['attempt'], job.next_attempt)
    guard.require(event["attempt"] <= job.max_attempts, "attempt_exceeds_max_attempts")
    guard.require(event["cycle_token"] == job.cycle, "cycle_token_mismatch",
                  "cycle_token {}, cycle {}", event['cycle_token'], job.cycle)
    guard.require(job.eligible_at is not None and event.at >= job.eligible_at,
                  "started_before_eligible")
    return replace(job, state="executing", revision=sequence, attempt=event["attempt"],
                   execution=sequence, attempted_at=event.at, eligible_at=None,
                   ready_order=None)


_DISPOSITION_STATES = {ev.COMPLETED: "completed", ev.RETRYABLE: "retryable",
                       ev.DISCARDED: "discarded"}


def _finished(job: JobState, sequence: int, event: ev.Event, guard: _Guard) -> JobState:
    guard.require(job.state == "executing", "finish_from_wrong_state", job.state)
    guard.require(event["execution_token"] == job.execution, "execution_token_mismatch",
                  "execution_token {}, execution {}", event['execution_token'], job.execution)
    disposition, next_attempt = expected_finish(event["outcome"], job.attempt, job.max_attempts)
    guard.require(event["disposition"] == disposition, "disposition_mismatch",
                  "disposition {}, derived {}", event['disposition'], disposition)
    guard.require(event["next_attempt"] == next_attempt, "next_attempt_mismatch",
                  "next_attempt {}, derived {}", event['next_attempt'], next_attempt)
    if disposition == ev.RETRYABLE:
        low, high = retry_due_range(job.attempt, event.at)
        guard.require(low <= event["next_due_at"] <= high, "retry_due_outside_window",
                      "next_due_at {} not in {}..{}", event['next_due_at'], low, high)
    state = _DISPOSITION_STATES[disposition]
    return replace(
        job, state=state, revision=sequence, next_attempt=next_attempt,
        eligible_at=event["next_due_at"], execution=None,
        completed_at=event.at if state == "completed" else job.completed_at,
        terminal_at=event.at if state in TERMINAL_STATES else None,
        diagnostic=event["diagnostic"] if event["diagnostic"] is not None else job.diagnostic,
    )


def _cancelled(job: JobState, sequence: int, event: ev.Event, guard: _Guard) -> JobState:
    guard.require(job.state in CANCELLABLE_STATES, "cancel_from_wrong_state", job.state)
    expected_token = job.execution if job.state == "executing" else None
    guard.require(event["execution_token"] == expected_token, "execution_token_mismatch",
                  "execution_token {}, expected {}", event['execution_token'], expected_token)
    return replace(job, state="cancelled", revision=sequence, execution=None,
                   next_attempt=None, eligible_at=None, ready_order=None,
                   terminal_at=event.at)


def _retried(job: JobState, sequence: int, event: ev.Event, guard: _Guard) -> JobState:
    mode = event["mode"]
    allowed = (job.state == "retryable" and mode == ev.MODE_EXPEDITE) or (
        job.state == "discarded" and mode == ev.MODE_NEW_CYCLE)
    guard.require(allowed, "retry_mode_not_allowed", "mode {} from {}", mode, job.state)
    if mode == ev.MODE_NEW_CYCLE:
        job = replace(job, attempt=0, next_attempt=1, cycle=sequence, attempted_at=None,
                      completed_at=None)
    return replace(job, state="available", revision=sequence, eligible_at=event.at,
                   ready_order=sequence, execution=None, terminal_at=None)


def _result_recorded(job: JobState, sequence: int, event: ev.Event, guard: _Guard) -> JobState:
    guard.require(job.state == "completed", "result_for_uncompleted_job", job.state)
    guard.require(not job.result_present, "result_already_recorded")
    return replace(job, revision=sequence, result_present=True, result=event["result"])


_HANDLERS = {
    ev.JOB_AVAILABLE: _available,
    ev.JOB_STARTED: _started,
    ev.JOB_FINISHED: _finished,
    ev.JOB_CANCELLED: _cancelled,
    ev.JOB_RETRIED: _retried,
    ev.RESULT_RECORDED: _result_recorded,
}


class JobTable:
    """Every job by ID with per-state counts; what replay builds and ``inspect`` reports."""

    def __init__(self) -> None:
        self._jobs: dict[bytes, JobState] = {}
        self._counts: Counter[str] = Counter()
        self.last_sequence = 0

    def apply(self, sequence: int, event: ev.Event) -> JobState:
        """Apply one job event through ``apply`` and store the result."""
        previous = self._jobs.get(event.job_id) if event.job_id is not None else None
        job = apply(previous, sequence, event)
        self.put(job)
        self.last_sequence = max(self.last_sequence, sequence)
        return job

    def put(self, job: JobState) -> None:
        """Store ``job`` (replacing its previous state), keeping the counts right."""
        previous = self._jobs.get(job.id)
        if previous is not None:
            self._counts[previous.state] -= 1
        self._jobs[job.id] = job
        self._counts[job.state] += 1

    def remove(self, job_id: bytes) -> JobState | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            self._counts[job.state] -= 1
        return job

    def get(self, job_id: bytes) -> JobState | None:
        return self._jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobState]:
        return iter(self._jobs.values())

    def counts(self) -> dict[str, int]:
        """The number of jobs in each of the seven states (zeros included)."""
        return {state: self._counts[state] for state in STATES}

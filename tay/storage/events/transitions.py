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
from typing import Any, Iterator, Mapping, NoReturn

from tay._frozen import Fields
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.events.definition import TIME_MAX, U64_MAX, canonical_bytes

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


class JobState(Fields):
    """The durable state of one job after the event with sequence ``revision``.

    Immutable. A named tuple rather than a frozen dataclass because replay builds one per
    event, and a tuple is built in one step instead of one guarded ``setattr`` per field.
    """

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
    failure: Mapping[str, str] | None = None  # the last worker failure's details (22,2)

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

    __slots__ = ("job_id", "sequence")

    def __init__(self, job_id: bytes | None, sequence: int) -> None:
        self.job_id, self.sequence = job_id, sequence

    def require(self, condition: bool, guard: str, detail: str = "", *values: Any) -> None:
        """``detail`` is a ``str.format`` template, filled only on failure (replay is hot)."""
        if not condition:
            self.fail(guard, detail, *values)

    def fail(self, guard: str, detail: str = "", *values: Any) -> NoReturn:
        raise TransitionRejected(guard, job_id=self.job_id, sequence=self.sequence,
                                 detail=detail.format(*values))


def _reject(payload: Mapping[str, Any], sequence: int, guard: str, detail: str = "",
            *values: Any) -> NoReturn:
    """The ``TransitionRejected`` of one event (built only on failure: apply is hot)."""
    _Guard(payload.get("job_id"), sequence).fail(guard, detail, *values)


_FIELD_INDEX = {name: index for index, name in enumerate(JobState._fields)}
_new_tuple = tuple.__new__
# JobState field positions, for the handlers that build the next state in one step
(_ID, _DEFINITION, _DEFINITION_BYTES, _STATE, _REVISION, _ATTEMPT, _NEXT_ATTEMPT, _CYCLE,
 _EXECUTION, _ELIGIBLE_AT, _READY_ORDER, _INSERTED_AT, _ATTEMPTED_AT, _COMPLETED_AT,
 _TERMINAL_AT, _DIAGNOSTIC, _RESULT_PRESENT, _RESULT, _FAILURE) = range(len(JobState._fields))


def _evolve(job: JobState, **changes: Any) -> JobState:
    """``job._replace(**changes)`` without its per-call checks (replay is hot)."""
    values = list(job)
    for name, new in changes.items():
        values[_FIELD_INDEX[name]] = new
    return _new_tuple(JobState, values)


def with_ready_order(job: JobState, order: int | None) -> JobState:
    """``job`` with another availability order (a Store-v2 epoch's allocator decides it)."""
    values = list(job)
    values[_READY_ORDER] = order
    return _new_tuple(JobState, values)


def apply(previous: JobState | None, sequence: int, event: ev.Event) -> JobState:
    """The next durable state of the job ``event`` names, or ``TransitionRejected``."""
    payload = event.payload
    kind = event.type
    handler = _HANDLERS_BY_TYPE.get(kind)
    if handler is None or event.schema != _SCHEMAS[kind]:
        _reject(payload, sequence, "not_a_job_event", "pair {}", (kind, event.schema))
    if type(sequence) is not int or not 1 <= sequence <= U64_MAX:
        _reject(payload, sequence, "invalid_sequence")
    expected_revision = payload["expected_revision"]
    if not expected_revision < sequence:
        _reject(payload, sequence, "expected_revision_not_below_sequence",
                "expected_revision {}", expected_revision)
    if handler is _inserted:
        if previous is not None:
            _reject(payload, sequence, "job_already_exists")
        return _inserted(sequence, event)
    if previous is None:
        _reject(payload, sequence, "job_absent")
    if previous[_ID] != payload.get("job_id"):
        _reject(payload, sequence, "job_id_mismatch")
    if previous[_REVISION] != expected_revision:
        _reject(payload, sequence, "revision_mismatch", "expected_revision {}, job revision {}",
                expected_revision, previous.revision)
    return handler(previous, sequence, payload)


def _inserted(sequence: int, event: ev.Event) -> JobState:
    payload = event.payload
    definition = payload["definition"]
    eligible_at = payload["eligible_at"]
    at = payload["at"]
    available = eligible_at <= at
    return _new_tuple(JobState, (
        payload["job_id"], definition, canonical_bytes(definition),
        "available" if available else "scheduled", sequence, 0, 1, sequence, None,
        eligible_at, sequence if available else None, at, None, None, None, None, False,
        None, None))


def _available(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    if job.state not in ("scheduled", "retryable"):
        _reject(event, sequence, "available_from_wrong_state", job.state)
    due_at = event["due_at"]
    if job.eligible_at != due_at:
        _reject(event, sequence, "due_at_mismatch", "due_at {}, eligible_at {}", due_at,
                job.eligible_at)
    return _evolve(job, state="available", revision=sequence, eligible_at=due_at,
                   ready_order=sequence)


def _started(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    if job[_STATE] != "available":
        _reject(event, sequence, "start_from_wrong_state", job.state)
    attempt, at = event["attempt"], event["at"]
    if attempt != job[_NEXT_ATTEMPT]:
        _reject(event, sequence, "attempt_mismatch", "attempt {}, next_attempt {}", attempt,
                job.next_attempt)
    if attempt > job[_DEFINITION]["max_attempts"]:
        _reject(event, sequence, "attempt_exceeds_max_attempts")
    if event["cycle_token"] != job[_CYCLE]:
        _reject(event, sequence, "cycle_token_mismatch", "cycle_token {}, cycle {}",
                event["cycle_token"], job.cycle)
    eligible_at = job[_ELIGIBLE_AT]
    if eligible_at is None or at < eligible_at:
        _reject(event, sequence, "started_before_eligible")
    return started_state(job, sequence, attempt, at)


def started_state(job: JobState, revision: int, attempt: int, at: int) -> JobState:
    """An available job executing attempt ``attempt`` from ``at`` (the checks done): the
    one state change both the ``job_started`` transition and the engine's fused start make."""
    # one tuple from the available job's fields (no list copy and item stores): state,
    # revision, attempt, execution, eligible_at, ready_order and attempted_at change
    (job_id, definition, canonical, _, _, _, next_attempt, cycle, _, _, _, inserted_at, _,
     completed_at, terminal_at, diagnostic, result_present, result, failure) = job
    return _new_tuple(JobState, (
        job_id, definition, canonical, "executing", revision, attempt, next_attempt, cycle,
        revision, None, None, inserted_at, at, completed_at, terminal_at, diagnostic,
        result_present, result, failure))


_DISPOSITION_STATES = {ev.COMPLETED: "completed", ev.RETRYABLE: "retryable",
                       ev.DISCARDED: "discarded"}


def _finished(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    if job[_STATE] != "executing":
        _reject(event, sequence, "finish_from_wrong_state", job.state)
    token = event["execution_token"]
    if token != job[_EXECUTION]:
        _reject(event, sequence, "execution_token_mismatch", "execution_token {}, execution {}",
                token, job.execution)
    attempt = job[_ATTEMPT]
    disposition, next_attempt = expected_finish(event["outcome"], attempt,
                                                job[_DEFINITION]["max_attempts"])
    if event["disposition"] != disposition:
        _reject(event, sequence, "disposition_mismatch", "disposition {}, derived {}",
                event["disposition"], disposition)
    if event["next_attempt"] != next_attempt:
        _reject(event, sequence, "next_attempt_mismatch", "next_attempt {}, derived {}",
                event["next_attempt"], next_attempt)
    at = event["at"]
    if disposition == ev.RETRYABLE:
        low, high = retry_due_range(attempt, at)
        if not low <= event["next_due_at"] <= high:
            _reject(event, sequence, "retry_due_outside_window", "next_due_at {} not in {}..{}",
                    event["next_due_at"], low, high)
    state = _DISPOSITION_STATES[disposition]
    diagnostic = event["diagnostic"]
    values = list(job)
    values[_STATE] = state
    values[_REVISION] = sequence
    values[_NEXT_ATTEMPT] = next_attempt
    values[_ELIGIBLE_AT] = event["next_due_at"]
    values[_EXECUTION] = None
    if state == "completed":
        values[_COMPLETED_AT] = values[_TERMINAL_AT] = at
    else:
        values[_TERMINAL_AT] = at if state in TERMINAL_STATES else None
        if values[_RESULT_PRESENT]:  # a result of this execution (_result_recorded)
            values[_RESULT_PRESENT] = False  # is kept only by its success
            values[_RESULT] = None
    if diagnostic is not None:
        values[_DIAGNOSTIC] = diagnostic
    return _new_tuple(JobState, values)


def _cancelled(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    if job.state not in CANCELLABLE_STATES:
        _reject(event, sequence, "cancel_from_wrong_state", job.state)
    expected_token = job.execution if job.state == "executing" else None
    if event["execution_token"] != expected_token:
        _reject(event, sequence, "execution_token_mismatch", "execution_token {}, expected {}",
                event["execution_token"], expected_token)
    return _evolve(job, state="cancelled", revision=sequence, execution=None,
                   next_attempt=None, eligible_at=None, ready_order=None,
                   terminal_at=event["at"], result_present=False, result=None)


def _retried(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    mode = event["mode"]
    allowed = (job.state == "retryable" and mode == ev.MODE_EXPEDITE) or (
        job.state == "discarded" and mode == ev.MODE_NEW_CYCLE)
    if not allowed:
        _reject(event, sequence, "retry_mode_not_allowed", "mode {} from {}", mode, job.state)
    if mode == ev.MODE_NEW_CYCLE:
        job = _evolve(job, attempt=0, next_attempt=1, cycle=sequence, attempted_at=None,
                      completed_at=None)
    return _evolve(job, state="available", revision=sequence, eligible_at=event["at"],
                   ready_order=sequence, execution=None, terminal_at=None)


def _result_recorded(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    # executing: the engine writes a success's result just before its finish, in the same
    # batch, so a batch cut between them leaves a job still executing (run again after the
    # restart, the result dropped by that finish) and never one completed without a result;
    # completed: the order of histories written before that (finish, then result)
    state = job[_STATE]
    if state != "completed" and state != "executing":
        _reject(event, sequence, "result_for_uncompleted_job", job.state)
    if job[_RESULT_PRESENT]:
        _reject(event, sequence, "result_already_recorded")
    values = list(job)
    values[_REVISION] = sequence
    values[_RESULT_PRESENT] = True
    values[_RESULT] = event["result"]
    return _new_tuple(JobState, values)


def _failure_recorded(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    """The details of a worker failure (same Outcome as its finish).

    executing, nothing recorded since its start: the engine writes a failure's details just
    before its finish, in the same batch, so a batch cut between them leaves the job still
    executing (run again after the restart, the details kept as its last failure: the
    worker reported them) and never one finished by the failure without its details;
    retryable or discarded after a failure: the order of histories written before that
    (finish, then details)."""
    state = job[_STATE]
    if state == "executing":
        if job[_REVISION] != job[_EXECUTION]:  # a result or details of this execution
            _reject(event, sequence, "failure_for_job_without_failure",
                    "executing, revision {} after its start {}", job.revision, job.execution)
    elif state not in ("retryable", "discarded") or job.diagnostic is None \
            or job.diagnostic["code"] == ev.DIAG_INTERRUPTED:
        _reject(event, sequence, "failure_for_job_without_failure", job.state)
    return _evolve(job, revision=sequence, failure=event["error"])


def _requeued(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    """A cancelled job starts a new cycle (attempts reset), available at ``at``."""
    if job.state != "cancelled":
        _reject(event, sequence, "requeue_from_wrong_state", job.state)
    return _evolve(job, state="available", revision=sequence, attempt=0, next_attempt=1,
                   cycle=sequence, attempted_at=None, completed_at=None, terminal_at=None,
                   eligible_at=event["at"], ready_order=sequence, execution=None)


def _expedited(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    """A job waiting for its scheduled time runs now: available at ``at``, its attempt and
    cycle unchanged (an operator's "run now"; a retryable one has (6,1) mode 0)."""
    if job.state != "scheduled":
        _reject(event, sequence, "expedite_from_wrong_state", job.state)
    return _evolve(job, state="available", revision=sequence, eligible_at=event["at"],
                   ready_order=sequence)


def _deleted(job: JobState, sequence: int, event: Mapping[str, Any]) -> JobState:
    """A finished job deleted by hand: the state returned (its revision the deletion's) is
    its last; whoever applies it drops the job instead of keeping it (``deletes``), so the
    id is free for a new job, as after its retention expired."""
    if job.state not in TERMINAL_STATES:
        _reject(event, sequence, "delete_from_wrong_state", job.state)
    return _evolve(job, revision=sequence)


def deletes(event: ev.Event) -> bool:
    """Whether ``event`` (applied) removes its job: a (29,2) ``job_deleted``."""
    return event.type == _DELETED_TYPE and event.schema == 2


JOB_PAIRS = _JOB_PAIRS = frozenset({ev.JOB_INSERTED, ev.JOB_AVAILABLE, ev.JOB_STARTED,
                                    ev.JOB_FINISHED, ev.JOB_CANCELLED, ev.JOB_RETRIED,
                                    ev.RESULT_RECORDED, ev.FAILURE_RECORDED,
                                    ev.JOB_REQUEUED, ev.JOB_EXPEDITED, ev.JOB_DELETED})
_DELETED_TYPE = ev.JOB_DELETED[0]

_HANDLERS = {
    ev.JOB_INSERTED: _inserted,
    ev.JOB_AVAILABLE: _available,
    ev.JOB_STARTED: _started,
    ev.JOB_FINISHED: _finished,
    ev.JOB_CANCELLED: _cancelled,
    ev.JOB_RETRIED: _retried,
    ev.RESULT_RECORDED: _result_recorded,
    ev.FAILURE_RECORDED: _failure_recorded,
    ev.JOB_REQUEUED: _requeued,
    ev.JOB_EXPEDITED: _expedited,
    ev.JOB_DELETED: _deleted,
}
# record types are unique across job pairs: one lookup by type, then the schema is checked
_HANDLERS_BY_TYPE = {pair[0]: handler for pair, handler in _HANDLERS.items()}
_SCHEMAS = {pair[0]: pair[1] for pair in _HANDLERS}
assert len(_HANDLERS_BY_TYPE) == len(_HANDLERS)


# ---- job attachments: state a (7,1) snapshot cannot hold (Store-v2 bases) ----------------
#
# A base writes each retained job as its (7,1) snapshot followed by one (31,2) attachment per
# piece of state the snapshot has no field for, expressed as the payload of the pair that
# owns that state with ``expected_revision`` equal to the snapshot's revision. ``attach``
# loads one onto the snapshot's job (the revision does not move); ``attachments`` writes
# them. A pair whose state must survive compaction adds a row to ``_ATTACHMENTS``.

def _attach_result(job: JobState, payload: Mapping[str, Any], guard: _Guard) -> JobState:
    if job.state != "completed":
        guard.fail("result_for_uncompleted_job", job.state)
    if job.result_present:
        guard.fail("result_already_recorded")
    return _evolve(job, result_present=True, result=payload["result"])


def _result_attachments(job: JobState) -> list[ev.Event]:
    if not job.result_present:
        return []
    # the result's own time is not retained; it was recorded with the completion
    return [ev.result_recorded(job.id, job.completed_at, job.revision, job.result)]


def _attach_failure(job: JobState, payload: Mapping[str, Any], guard: _Guard) -> JobState:
    if job.failure is not None:
        guard.fail("failure_already_attached")
    return _evolve(job, failure=payload["error"])


def _failure_attachments(job: JobState) -> list[ev.Event]:
    if job.failure is None:
        return []
    from tay.storage.events.operations import failure_recorded  # owner of (22,2)

    # the failure's own time is not retained; the job's last finish or start stands for it
    at = job.terminal_at if job.terminal_at is not None else (
        job.attempted_at if job.attempted_at is not None else job.inserted_at)
    return [failure_recorded(job.id, at, job.revision, dict(job.failure))]


_ATTACHMENTS = {ev.RESULT_RECORDED: (_attach_result, _result_attachments),
                ev.FAILURE_RECORDED: (_attach_failure, _failure_attachments)}


def attach(job: JobState, event: ev.Event) -> JobState:
    """Load one base attachment onto the job its snapshot just produced."""
    guard = _Guard(job.id, job.revision)
    loader = _ATTACHMENTS.get(event.pair)
    if loader is None:
        guard.fail("not_a_job_attachment", "pair {}", event.pair)
    if event.payload["job_id"] != job.id:
        guard.fail("attachment_job_mismatch")
    if event.payload["expected_revision"] != job.revision:
        guard.fail("attachment_revision_mismatch", "expected_revision {}, snapshot revision {}",
                   event.payload["expected_revision"], job.revision)
    return loader[0](job, event.payload, guard)


def attachments(job: JobState) -> list[ev.Event]:
    """The attachment events a base writes after this job's snapshot, in pair order."""
    out: list[ev.Event] = []
    for pair in sorted(_ATTACHMENTS):
        out.extend(_ATTACHMENTS[pair][1](job))
    return out


class JobTable:
    """Every job by ID with per-state counts; what replay builds and ``inspect`` reports."""

    def __init__(self) -> None:
        self._jobs: dict[bytes, JobState] = {}
        self._counts: Counter[str] = Counter()
        self.last_sequence = 0

    def apply(self, sequence: int, event: ev.Event) -> JobState:
        """Apply one job event through ``apply`` and store the result."""
        job_id = event.payload.get("job_id")
        previous = self._jobs.get(job_id) if job_id is not None else None
        job = apply(previous, sequence, event)
        self.install(job, event)
        if sequence > self.last_sequence:
            self.last_sequence = sequence
        return job

    def install(self, job: JobState, event: ev.Event | None) -> None:
        """A job's state as ``event`` left it (None: a base snapshot), or the job dropped
        when the event deletes it (``deletes``)."""
        if event is not None and deletes(event):
            self.remove(job.id)
        else:
            self.put(job)

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

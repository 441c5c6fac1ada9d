"""One retained job as the engine holds it: durable state plus engine-side bookkeeping.

``JobState`` (tay.storage.events.transitions) is the durable part and only changes through
``apply``. ``JobEntry`` adds what is not durable: whether the job is volatile, its budget
charge, and the ready key that orders it inside its queue. ``LazyJobEntry`` is a terminal
job from a restart's base, or a job a restart's tail walk left available at its insert or
retryable or discarded by a worker failure, whose JobState is built on first read.
``ParkedJobEntry`` is a job that has waited a while (for a dispatch or its due time), its
JobState packed into one plain tuple that the cycle collector does not track, until it is
read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tay.engine.retained import packed_layout as layout
from tay.storage.events.definition import (
    MAX_ATTEMPTS, QUEUE_KEY, WORKER_KEY, LazyDefinition,
)
from tay.storage.events.transitions import TERMINAL_STATES, JobState, started_state
from tay.storage.v2.rows import JobRow

if TYPE_CHECKING:
    from tay.storage.v2.tail import FailedRow, LiveRow


class JobEntry:
    """``stamp``: the admin index stamp of the job's last transition
    (tay.engine.retained.job_index); ``attempts``: the attempt timeline (tuples of attempt,
    started_at, finished_at, outcome) kept since the job was replayed or inserted;
    ``schedule_id``: the schedule that admitted it, when known."""

    __slots__ = ("state", "volatile", "charge", "margin", "ready_key", "reservation_id",
                 "queue", "task", "stamp", "attempts", "schedule_id", "index_keys", "queue_row")

    def __init__(self, state: JobState, volatile: bool, charge: int) -> None:
        self.state = state
        self.volatile = volatile
        self.charge = charge  # state-budget bytes in all
        self.margin = 0  # of which charged after admission (result, failure details)
        self.ready_key: tuple[int, int, bytes] | None = None  # its ready heap entry
        self.reservation_id: str | None = None
        definition = state.definition
        if type(definition) is LazyDefinition:  # every live insert: no __getitem__ call
            scalars = definition.scalars
            self.queue: str = scalars[QUEUE_KEY]
            self.task: str = scalars[WORKER_KEY]
        else:
            self.queue = definition["queue_key"]
            self.task = definition["worker_key"]
        self.stamp = 0
        self.attempts: tuple[tuple[int, int, int | None, str | None], ...] | None = None
        self.schedule_id: str | None = None
        self.index_keys = index_keys_for(self.queue, self.task)  # job_index lists
        self.queue_row: list[int] = []  # its queue's counts by state (EngineState.queue_counts)

    @property
    def durability(self) -> str:
        return "volatile" if self.volatile else "persistent"


STATE_SLOT = JobEntry.__dict__["state"]  # the slot itself, below LazyJobEntry's property
# (tay.engine.epoch's fused start and success read and set a row through it)


class LazyJobEntry(JobEntry):
    """A terminal job replayed from a base and kept as its ``JobRow`` (tay.storage.v2.rows),
    an available tail job kept as its ``LiveRow`` or a failed one as its ``FailedRow``
    (tay.storage.v2.tail), or a live job the
    fused start or success left as its ``StartedRow`` / ``CompletedRow`` (below; made by
    tay.engine.epoch, which sets the class), until something reads ``state``: that builds
    the JobState once and the entry becomes a plain ``JobEntry`` (same slots), so nothing
    else ever pays for the laziness."""

    __slots__ = ()

    def __init__(self, row: "JobRow | LiveRow | FailedRow", charge: int) -> None:  # noqa
        STATE_SLOT.__set__(self, row)
        self.volatile = False
        self.charge = charge
        self.margin = 0
        self.ready_key = None
        self.reservation_id = None
        self.queue = row.queue
        self.task = row.task
        self.stamp = 0
        self.attempts = None
        self.schedule_id = None
        self.index_keys = index_keys_for(self.queue, self.task)
        self.queue_row = []

    @property  # type: ignore[override]
    def state(self) -> JobState:
        job = STATE_SLOT.__get__(self).job_state()
        self.state = job
        return job

    @state.setter
    def state(self, job: JobState) -> None:
        """The entry becomes a plain one holding ``job``; a first attempt its fused row
        implied moves to ``attempts``."""
        self.attempts = timeline(self)
        STATE_SLOT.__set__(self, job)
        self.__class__ = JobEntry


class ParkedJobEntry(JobEntry):
    """A waiting job parked by a running server's rounds (``EngineState.park_waiting``):
    its state slot holds its JobState packed into one flat tuple (the layout of
    tay.engine.retained.packed_layout), so of the three objects a waiting job was to the
    cycle collector (this entry, its JobState, its LazyDefinition) only the entry is left,
    and a full collection walks a backlog a third as long. Reading ``state`` builds the
    JobState again and makes the entry a plain ``JobEntry`` (same slots); ``peek`` reads
    the tuple in place (``ParkedRow``). Nothing durable, counted or indexed changes."""

    __slots__ = ()

    @property  # type: ignore[override]
    def state(self) -> JobState:
        job = layout.job_state(STATE_SLOT.__get__(self))
        self.state = job
        return job

    @state.setter
    def state(self, job: JobState) -> None:
        STATE_SLOT.__set__(self, job)
        self.__class__ = JobEntry


class ParkedRow(tuple):
    """What ``peek`` hands out for a parked job: a copy of its packed tuple whose attributes
    named like JobState's read the same values in place (made per read, never kept)."""

    __slots__ = ()

    @property
    def id(self) -> bytes:
        return self[layout.ID]

    @property
    def state(self) -> str:
        return self[layout.STATE]

    @property
    def revision(self) -> int:
        return self[layout.REVISION]

    @property
    def ready_order(self) -> int | None:
        return self[layout.READY_ORDER]

    @property
    def terminal_at(self) -> int | None:
        return self[layout.TERMINAL_AT]

    @property
    def terminal(self) -> bool:
        return self[layout.STATE] in TERMINAL_STATES

    def job_state(self) -> JobState:
        return layout.job_state(self)


_new_tuple = tuple.__new__

# the states of a job that waits: for a dispatch (available) or its due time
WAITING = frozenset({"scheduled", "available", "retryable"})


class _FusedRow(tuple):
    """What the fused start's and success's rows share: the available JobState the start
    began from comes first (its id is the job's), and neither is in a ready queue. A job
    with no attempt timeline when the fused start took it keeps ``attempts`` None: its
    timeline is the one attempt the row holds (``timeline``), set in ``attempts`` when the
    JobState is built."""

    __slots__ = ()
    ready_order = None

    @property
    def id(self) -> bytes:
        return self[0][0]


class StartedRow(_FusedRow):
    """A job the fused start made executing, not built yet: (the available JobState it
    started from, the start's revision, attempt, at). ``job_state()`` is the JobState the
    start's ``apply`` makes (``started_state``); the attributes named like JobState's hold
    the same values, for ``peek`` readers. Built with ``tuple.__new__`` (no __init__)."""

    __slots__ = ()
    state = "executing"
    terminal = False

    @property
    def revision(self) -> int:
        return self[1]

    @property
    def terminal_at(self) -> int | None:
        return self[0].terminal_at

    def job_state(self) -> JobState:
        job, revision, attempt, at = self
        return started_state(job, revision, attempt, at)

    def timeline(self) -> tuple[tuple[int, int, None, None]]:
        return ((self[2], self[3], None, None),)


class CompletedRow(_FusedRow):
    """A job the fused start and fused success made completed with a nil result, not built
    yet: (the available JobState its start began from, the start's revision, attempt,
    started at, completed at). The result is revision + 1, the finish revision + 2."""

    __slots__ = ()
    state = "completed"
    terminal = True

    @property
    def revision(self) -> int:
        return self[1] + 2

    @property
    def terminal_at(self) -> int:
        return self[4]

    def job_state(self) -> JobState:
        (job, revision, attempt, started_at, at) = self
        (job_id, definition, canonical, _, _, _, _, cycle, _, _, _, inserted_at, _, _, _,
         diagnostic, _, result, failure) = job
        return _new_tuple(JobState, (
            job_id, definition, canonical, "completed", revision + 2, attempt, None, cycle,
            None, None, None, inserted_at, started_at, at, at, diagnostic, True, result,
            failure))

    def timeline(self) -> tuple[tuple[int, int, int, str]]:
        return ((self[2], self[3], self[4], "completed"),)


def read_state(entry: JobEntry) -> JobState:
    """The entry's JobState for a read that changes nothing (a status, a result, an admin
    page): a parked job's is built from its tuple and not kept, so the job stays parked
    (reading ``state`` would make it a plain entry of three tracked objects again, and a
    client polling a waiting job's status would undo its parking every time)."""
    if type(entry) is ParkedJobEntry:
        return layout.job_state(STATE_SLOT.__get__(entry))
    return entry.state


def peek(entry: JobEntry
         ) -> "JobState | JobRow | LiveRow | FailedRow | StartedRow | CompletedRow | ParkedRow":
    """The entry's JobState, or its row when not built yet, for bookkeeping
    that reads only what they all hold alike (``id``, ``state``, ``revision``,
    ``terminal``, ``terminal_at``, ``ready_order``): walking every job builds none."""
    row = STATE_SLOT.__get__(entry)
    if type(row) is tuple:  # a parked job's packed tuple (ParkedJobEntry)
        return _new_tuple(ParkedRow, row)
    return row


def timeline(entry: JobEntry) -> tuple[tuple[int, int, int | None, str | None], ...] | None:
    """The entry's attempt timeline: ``attempts``, or the first attempt a fused start's or
    success's row holds (the entry's ``attempts`` stays None until its JobState is built)."""
    attempts = entry.attempts
    if attempts is None:
        row = STATE_SLOT.__get__(entry)
        if isinstance(row, _FusedRow):
            return row.timeline()
    return attempts


# One index_keys tuple per (queue, task), shared by its jobs: three tuples less per job
# (about 1.7 MB for 10,000 retained jobs). Bounded: many distinct pairs just start it over.
INDEX_KEYS: dict[tuple[str, str], tuple[tuple[str, str], tuple[str, str]]] = {}
_INDEX_KEYS_MAX = 4096


def index_keys_for(queue: str, task: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The shared ``index_keys`` of a (queue, task) pair (the fused insert in
    tay.engine.epoch reads ``INDEX_KEYS`` first, inline, and calls this on a miss)."""
    keys = INDEX_KEYS.get((queue, task))
    if keys is None:
        if len(INDEX_KEYS) >= _INDEX_KEYS_MAX:
            INDEX_KEYS.clear()
        keys = INDEX_KEYS[(queue, task)] = (("queue", queue), ("task", task))
    return keys


def public_job(entry: JobEntry, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """The public job object of protocol.md §1.7 (real JSON nulls, plus ``durability``).

    ``args``: a dict equal to the stored args *and* in their canonical key order (see
    ``canonical_order``), or their sorted JSON text as an ``orjson.Fragment`` (a socket
    enqueue's, written as the dict would be), so the stored bytes need not be decoded again;
    None decodes them.
    """
    job = read_state(entry)
    definition = job.definition
    state = job.state
    diagnostic = job.diagnostic
    return {
        "id": job.id.hex(),
        "task": entry.task,  # definition["worker_key"], kept on the entry
        "args": definition["args"] if args is None else args,
        "state": state,
        "attempt": job.attempt,
        "max_attempts": definition.scalars[MAX_ATTEMPTS]
        if type(definition) is LazyDefinition else definition["max_attempts"],
        "queue": entry.queue,  # definition["queue_key"]
        "scheduled_at": job.eligible_at if state in WAITING else None,
        "completed_at": job.completed_at,
        "errors": [dict(diagnostic)] if diagnostic is not None else [],
        "durability": "volatile" if entry.volatile else "persistent",  # entry.durability
    }



def canonical_order(value: Any) -> bool:
    """Whether every object inside ``value`` already lists its keys in canonical Value order.

    Canonical maps sort keys by code point (= UTF-8 byte order), so such a value, once
    stored, decodes to an equal dict with the same key order: replies may show it directly.
    """
    kind = type(value)
    if kind is dict:
        previous = None
        for key, item in value.items():
            if previous is not None and not previous < key:
                return False
            previous = key
            if (type(item) is dict or type(item) is list) and not canonical_order(item):
                return False
        return True
    if kind is list:
        return all(canonical_order(item) for item in value
                   if type(item) is dict or type(item) is list)
    return True

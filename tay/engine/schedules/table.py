"""The durable schedule table: one ``apply`` for live mutations and replay, plus delivery.

The table is synchronous and pure: time is passed in, job states come from a lookup the
engine supplies (``JobLookup``: job id -> state string, or None when the job is unknown),
and every durable change is an ``Event`` (tay.storage.events.schedules) that the engine
sequences, appends, and then feeds back through :meth:`ScheduleTable.apply` -- the same
function recovery calls for each replayed schedule event. Live methods never mutate durable
state themselves; they only *propose* events.

Engine loop (docs/schedules.md has the full contract)::

    for work in table.due_work(now, lookup):
        if isinstance(work, Event):            # skip-advance: append, then table.apply
            ...
        else:                                  # Occurrence: admit its job (id is stable)
            if admitted or job_with_that_id_exists:
                event = table.delivered(work, now, lookup)   # append AFTER the job insert
            else:
                table.admission_failed(work.schedule_id, now)  # same id again in 1 s

Volatile timers (admission retry, queue polling) are not durable: after a restart the due
occurrence simply falls due again with the same job id.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from tay._frozen import Frozen, LazyModule, replace, set_field
from tay.failures import RecoveryRefused, RequestRefused, TayFailure
from tay.storage.events import schedules as se
from tay.storage.formats import value
from tay.storage.events import Event

# The engine's lazy boundary: cron parsing, declaration checks and occurrence times load
# with the first schedule (declared or replayed), not with every ``tay serve`` start.
if TYPE_CHECKING:
    from tay.engine.schedules import cron
    from tay.engine.schedules import declaration as schedule_declaration
    from tay.engine.schedules import timing as schedule_timing
    from tay.engine.schedules.declaration import OptionsValidator
else:
    cron = LazyModule("tay.engine.schedules.cron")
    schedule_declaration = LazyModule("tay.engine.schedules.declaration")
    schedule_timing = LazyModule("tay.engine.schedules.timing")

JobLookup = Callable[[bytes], "str | None"]
TERMINAL_STATES = frozenset({"completed", "cancelled", "discarded"})
RETRY_MS = 1_000  # temporary admission failure / queue policy: look again after this
PAGE_DEFAULT, PAGE_MAX = 50, 100


def is_busy(state: str | None) -> bool:
    """A job still counts against overlap unless it is terminal or unknown (expired)."""
    return state is not None and state not in TERMINAL_STATES


class ScheduleState(Frozen):
    """Everything durable about one schedule (what replay must rebuild exactly)."""

    __slots__ = ("schedule_id", "definition", "definition_bytes", "revision", "record_revision",
                 "next_at", "last_at", "cancelled_at", "active", "membership_complete")
    schedule_id: str
    definition: Mapping[str, Any]
    definition_bytes: bytes  # compared, but left out of the repr
    revision: int  # logical revision: +1 per registration
    record_revision: int  # sequence of the last event applied to this schedule
    next_at: int | None
    last_at: int | None
    cancelled_at: int | None
    active: tuple[bytes, ...]  # admitted occurrences not known to be finished, oldest first
    membership_complete: bool

    def __init__(self, schedule_id: str, definition: Mapping[str, Any], definition_bytes: bytes,
                 revision: int, record_revision: int, next_at: int | None, last_at: int | None,
                 cancelled_at: int | None, active: tuple[bytes, ...],
                 membership_complete: bool) -> None:
        set_field(self, "schedule_id", schedule_id)
        set_field(self, "definition", definition)
        set_field(self, "definition_bytes", definition_bytes)
        set_field(self, "revision", revision)
        set_field(self, "record_revision", record_revision)
        set_field(self, "next_at", next_at)
        set_field(self, "last_at", last_at)
        set_field(self, "cancelled_at", cancelled_at)
        set_field(self, "active", active)
        set_field(self, "membership_complete", membership_complete)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__
                           if name != "definition_bytes")
        return f"{type(self).__qualname__}({fields})"

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None


class Occurrence(Frozen):
    """A due occurrence to admit as job ``job_id`` (task/args/options from the definition)."""

    __slots__ = ("schedule_id", "revision", "due_at", "job_id", "task", "args", "options")
    schedule_id: str
    revision: int
    due_at: int
    job_id: bytes
    task: str
    args: Mapping[str, Any]
    options: Mapping[str, Any]

    def __init__(self, schedule_id: str, revision: int, due_at: int, job_id: bytes, task: str,
                 args: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        set_field(self, "schedule_id", schedule_id)
        set_field(self, "revision", revision)
        set_field(self, "due_at", due_at)
        set_field(self, "job_id", job_id)
        set_field(self, "task", task)
        set_field(self, "args", args)
        set_field(self, "options", options)


def _rejected(reason: str, sequence: int, schedule_id: str, **extra: Any) -> RecoveryRefused:
    return RecoveryRefused("consumer_rejected", reason, sequence=sequence,
                           schedule_id=schedule_id, **extra)


class ScheduleTable:
    """All schedules by id, with the one ``apply`` and the live proposals."""

    def __init__(self, *, options_validator: OptionsValidator | None = None,
                 new_id: Callable[[], str] | None = None) -> None:
        self._states: dict[str, ScheduleState] = {}
        self._timings: dict[str, schedule_timing.Timing] = {}
        self._ids: list[str] = []  # sorted, for exclusive-cursor pages
        self._retry_at: dict[str, int] = {}  # volatile: admission retry / queue polling
        # paused by an operator (durable (25,2)/(26,2), outside each schedule's own chain):
        # no occurrence falls due while paused
        self.paused: set[str] = set()
        # (wake, id) with lazy deletion: an entry is live while it equals _wake(id), so
        # next_wakeup and due_work cost O(log n) per change instead of a scan of all schedules.
        self._wake_heap: list[tuple[int, str]] = []
        self._options_validator = options_validator  # None: structural_options_check
        self._new_id = new_id

    # ---- durable state ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._states)

    def states(self) -> dict[str, ScheduleState]:
        return dict(self._states)

    def get(self, schedule_id: str) -> ScheduleState | None:
        return self._states.get(schedule_id)

    def apply(self, sequence: int, event: Event) -> ScheduleState:
        """Apply one schedule event (live or replay); refuses invalid history."""
        schedule_id = event["schedule_id"]
        previous = self._states.get(schedule_id)
        if previous is not None and sequence <= previous.record_revision:
            raise _rejected("sequence_not_increasing", sequence, schedule_id)
        handler = _HANDLERS.get(event.pair)
        if handler is None:
            raise _rejected("not_a_schedule_event", sequence, schedule_id, pair=list(event.pair))
        state = handler(previous, sequence, event)
        if previous is None or state.definition_bytes != previous.definition_bytes:
            try:
                self._timings[schedule_id] = schedule_timing.Timing.of(state.definition)
            except TayFailure as failure:
                raise _rejected("invalid_definition", sequence, schedule_id,
                                problem=failure.message) from None
        if previous is None:
            bisect.insort(self._ids, schedule_id)
        self._states[schedule_id] = state
        self._retry_at.pop(schedule_id, None)
        self._push_wake(schedule_id)
        return state

    def set_paused(self, schedule_id: str, paused: bool) -> None:
        """Apply a pause or a resume (live or replay) of a known schedule."""
        if schedule_id not in self._states:
            raise RecoveryRefused("consumer_rejected", "unknown_schedule",
                                  schedule_id=schedule_id)
        if paused:
            self.paused.add(schedule_id)
        else:
            self.paused.discard(schedule_id)
            self._push_wake(schedule_id)

    def _wake(self, schedule_id: str) -> int | None:
        """When ``schedule_id`` may next have due work (None: never)."""
        state = self._states[schedule_id]
        if state.cancelled or state.next_at is None or schedule_id in self.paused:
            return None
        return max(state.next_at, self._retry_at.get(schedule_id, 0))

    def _push_wake(self, schedule_id: str) -> None:
        wake = self._wake(schedule_id)
        if wake is not None:
            heapq.heappush(self._wake_heap, (wake, schedule_id))
        if len(self._wake_heap) > 2 * len(self._states) + 1024:  # drop stale entries
            live = ((self._wake(key), key) for key in self._states)
            self._wake_heap = [item for item in live if item[0] is not None]
            heapq.heapify(self._wake_heap)

    def _pop_due(self, now_ms: int) -> list[str]:
        """Ids whose live wake entry is at or before ``now_ms``, earliest first, once each."""
        heap, due, seen = self._wake_heap, [], set()
        while heap and heap[0][0] <= now_ms:
            wake, schedule_id = heapq.heappop(heap)
            if schedule_id not in seen and self._wake(schedule_id) == wake:
                seen.add(schedule_id)
                due.append(schedule_id)
        return due

    # ---- live mutations (each returns the event to sequence, append and apply) ---------

    def declare(self, request: Mapping[str, Any], now_ms: int,
                lookup: JobLookup) -> tuple[str, Event | None]:
        """Validate a ``schedule`` request; (schedule id, event or None when idempotent)."""
        if self._new_id is None:
            new_id = _no_generated_ids
        else:
            new_id = self._new_id
        options_validator = self._options_validator
        if options_validator is None:
            options_validator = schedule_declaration.structural_options_check
        declaration = schedule_declaration.parse_declaration(
            request, now_ms, new_id=new_id, options_validator=options_validator)
        schedule_id = declaration.schedule_id
        definition_bytes = value.encode(declaration.definition)
        previous = self._states.get(schedule_id)
        if previous is not None and not previous.cancelled and \
                previous.definition_bytes == definition_bytes:
            return schedule_id, None
        if previous is not None and not previous.membership_complete \
                and declaration.definition["overlap"] != "allow":
            raise RequestRefused(
                "this schedule's occurrence membership is unknown (legacy allow history); "
                "cancel it and declare the stricter overlap under a new declaration id",
                code="schedule_conflict", schedule_id=schedule_id,
            )
        first_due = schedule_timing.Timing.of(declaration.definition).first_due(
            declaration.start_ms)
        if first_due is None and declaration.start_ms >= cron.LAST_COMPUTABLE_MS:
            field = "start_at" if request.get("start_at") is not None else "delay"
            raise RequestRefused(f"{field} puts the first cron occurrence past 9999-12-30, "
                                 "the last date cron times are computed for",
                                 code="invalid_schedule", field=field)
        if first_due is None:
            raise RequestRefused("cron expression has no occurrence within 5 x 366 days",
                                 code="invalid_schedule", field="cron")
        event = se.schedule_state(
            action="registered", schedule_id=schedule_id, at=now_ms,
            definition=declaration.definition,
            revision=1 if previous is None else previous.revision + 1,
            expected_revision=0 if previous is None else previous.record_revision,
            next_at=first_due, last_at=None, cancelled_at=None,
            active=() if previous is None else _still_busy(previous.active, lookup),
            membership_complete=True if previous is None else previous.membership_complete,
        )
        return schedule_id, event

    def cancel(self, schedule_id: Any, now_ms: int) -> Event | None:
        """Cancel (admitted jobs keep running); None when it was already cancelled."""
        state = self.require(schedule_id)
        if state.cancelled:
            return None
        return self._state_event(state, "cancelled", now_ms, cancelled_at=now_ms)

    def skip_missed(self, schedule_id: str, now_ms: int, lookup: JobLookup) -> Event | None:
        """The (13,2) ``advanced`` that moves a schedule past the due times it missed while
        paused, as an overlap skip does (None: nothing was missed)."""
        state = self.require(schedule_id)
        if state.cancelled or state.next_at is None or state.next_at > now_ms:
            return None
        timing = self._timings[schedule_id]
        return self._state_event(state, "advanced", now_ms,
                                 next_at=timing.first_after(state.next_at, now_ms),
                                 active=_still_busy(state.active, lookup))

    def checkpoint(self, schedule_id: str, now_ms: int, lookup: JobLookup) -> Event:
        """A (13,2) checkpoint of the current state (compaction), membership pruned."""
        state = self.require(schedule_id)
        return self._state_event(state, "checkpoint", now_ms,
                                 active=_still_busy(state.active, lookup))

    # ---- delivery --------------------------------------------------------------------

    def due_work(self, now_ms: int, lookup: JobLookup) -> list[Occurrence | Event]:
        """At most one item per due schedule: an ``Occurrence`` to admit or a skip event.

        A returned item stays due until its event is applied (or ``admission_failed``), so
        an item the caller drops is offered again by the next call.
        """
        work: list[Occurrence | Event] = []
        for schedule_id in self._pop_due(now_ms):
            item = self._due_item(self._states[schedule_id], now_ms, lookup)
            if item is not None:
                work.append(item)
            self._push_wake(schedule_id)
        return work

    def _due_item(self, state: ScheduleState, now_ms: int,
                  lookup: JobLookup) -> Occurrence | Event | None:
        overlap = state.definition["overlap"]
        busy = overlap != "allow" and any(is_busy(lookup(job)) for job in state.active)
        if busy and overlap == "queue":
            self._retry_at[state.schedule_id] = now_ms + RETRY_MS  # caller pushes the wake
            return None
        if busy:  # skip: advance past now, keeping the busy jobs as the link
            timing = self._timings[state.schedule_id]
            return self._state_event(
                state, "advanced", now_ms, next_at=timing.first_after(state.next_at, now_ms),
                active=_still_busy(state.active, lookup),
            )
        definition = state.definition
        return Occurrence(
            state.schedule_id, state.revision, state.next_at,
            schedule_timing.occurrence_job_id(state.schedule_id, state.next_at),
            definition["task"], definition["args"], definition["options"],
        )

    def delivered(self, occurrence: Occurrence, now_ms: int, lookup: JobLookup) -> Event:
        """The (11,2) event recording that ``occurrence`` was durably admitted."""
        state = self.require(occurrence.schedule_id)
        if state.revision != occurrence.revision or state.next_at != occurrence.due_at \
                or state.cancelled:
            raise ValueError(f"stale occurrence {occurrence!r}: the schedule changed")
        active = [job for job in _still_busy(state.active, lookup) if job != occurrence.job_id]
        active.append(occurrence.job_id)
        timing = self._timings[state.schedule_id]
        return se.schedule_delivered(
            schedule_id=state.schedule_id, at=max(now_ms, occurrence.due_at),
            due_at=occurrence.due_at,
            job_id=occurrence.job_id, next_at=timing.after_delivery(occurrence.due_at, now_ms),
            revision=state.revision, expected_revision=state.record_revision, active=active,
        )

    def admission_failed(self, schedule_id: str, now_ms: int) -> None:
        """A temporary admission failure: the same occurrence (same job id) again later."""
        self._retry_at[schedule_id] = now_ms + RETRY_MS
        self._push_wake(schedule_id)

    def next_wakeup(self) -> int | None:
        """The earliest instant ``due_work`` may have something (None: nothing scheduled)."""
        heap = self._wake_heap
        while heap and self._wake(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # ---- reads -----------------------------------------------------------------------

    def require(self, schedule_id: Any) -> ScheduleState:
        if type(schedule_id) is not str:
            raise RequestRefused("schedule_id must be a string", code="invalid_schedule_id",
                                 field="schedule_id")
        state = self._states.get(schedule_id)
        if state is None:
            raise RequestRefused(f"no schedule {schedule_id!r}", code="schedule_not_found",
                                 schedule_id=schedule_id)
        return state

    def status(self, schedule_id: Any, lookup: JobLookup | None = None) -> dict[str, Any]:
        return public_schedule(self.require(schedule_id), lookup)

    def page(self, limit: Any = None, cursor: Any = None,
             lookup: JobLookup | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """Up to ``limit`` schedules after ``cursor`` (exclusive) in lexical id order."""
        limit = PAGE_DEFAULT if limit is None else limit
        if type(limit) is not int or not 1 <= limit <= PAGE_MAX:
            raise RequestRefused(f"limit must be an integer in 1..{PAGE_MAX}",
                                 code="invalid_request", field="limit")
        if cursor is not None and type(cursor) is not str:
            raise RequestRefused("cursor must be a schedule id string", code="invalid_request",
                                 field="cursor")
        start = 0 if cursor is None else bisect.bisect_right(self._ids, cursor)
        chosen = self._ids[start:start + limit]
        more = start + limit < len(self._ids)
        objects = [public_schedule(self._states[key], lookup) for key in chosen]
        return objects, (chosen[-1] if more and chosen else None)

    # ---- helpers ---------------------------------------------------------------------

    def _state_event(self, state: ScheduleState, action: str, now_ms: int, **changes: Any) -> Event:
        fields: dict[str, Any] = {
            "next_at": state.next_at, "last_at": state.last_at,
            "cancelled_at": state.cancelled_at, "active": state.active,
        }
        fields.update(changes)
        return se.schedule_state(
            action=action, schedule_id=state.schedule_id, at=now_ms,
            definition=state.definition, revision=state.revision,
            expected_revision=state.record_revision,
            membership_complete=state.membership_complete, **fields,
        )


def _no_generated_ids() -> str:
    raise RequestRefused("declaration_id is required", code="invalid_schedule",
                         field="declaration_id")


def _still_busy(active: Iterable[bytes], lookup: JobLookup) -> list[bytes]:
    return [job for job in active if is_busy(lookup(job))]


def public_schedule(state: ScheduleState, lookup: JobLookup | None = None) -> dict[str, Any]:
    """The wire ``schedule`` object: definition fields, revision, times, active job."""
    definition = state.definition
    active = list(state.active) if lookup is None else _still_busy(state.active, lookup)
    cron = definition["kind"] == "cron"
    return {
        "id": state.schedule_id,
        "task": definition["task"],
        "args": definition["args"],
        "kind": definition["kind"],
        "cron": definition["expression"] if cron else None,
        "every_ms": None if cron else definition["expression"],
        "timezone": definition["timezone"],
        "catch_up": definition["catch_up"],
        "overlap": definition["overlap"],
        "options": definition["options"],
        "revision": state.revision,
        "next_at": None if state.cancelled else state.next_at,
        "last_at": state.last_at,
        "cancelled_at": state.cancelled_at,
        "active_job_id": active[-1].hex() if active else None,
    }


# ---- the transition rules (shared by live and replay) ---------------------------------

def _expect(condition: bool, reason: str, sequence: int, schedule_id: str) -> None:
    if not condition:
        raise _rejected(reason, sequence, schedule_id)


def _upsert_revision(previous: ScheduleState | None, sequence: int, event: Event) -> None:
    expected = 0 if previous is None else previous.record_revision
    _expect(event["expected_revision"] == expected, "expected_revision_mismatch",
            sequence, event["schedule_id"])


def _live(previous: ScheduleState | None, sequence: int, event: Event) -> ScheduleState:
    schedule_id = event["schedule_id"]
    _expect(previous is not None, "unknown_schedule", sequence, schedule_id)
    _expect(not previous.cancelled, "schedule_cancelled", sequence, schedule_id)
    _expect(event["expected_revision"] == previous.record_revision,
            "expected_revision_mismatch", sequence, schedule_id)
    return previous


def _subset(active: Iterable[bytes], allowed: Iterable[bytes]) -> bool:
    return set(active) <= set(allowed)


def _apply_state(previous: ScheduleState | None, sequence: int, event: Event) -> ScheduleState:
    """(13,2): registered / cancelled / advanced / checkpoint."""
    schedule_id, action = event["schedule_id"], event["action"]
    definition = event["definition"]
    definition_bytes = value.encode(dict(definition))
    complete = event["membership"] == "complete"
    active = tuple(event["active"])
    if action in ("registered", "checkpoint"):
        _upsert_revision(previous, sequence, event)
    else:
        _live(previous, sequence, event)
    if previous is None:
        _expect(action in ("registered", "checkpoint"), "unknown_schedule", sequence, schedule_id)
        _expect(action == "checkpoint" or (complete and not active and event["revision"] == 1),
                "bad_first_registration", sequence, schedule_id)
    else:
        _expect(_subset(active, previous.active), "membership_grew", sequence, schedule_id)
        _expect(complete == previous.membership_complete, "membership_flag_changed",
                sequence, schedule_id)
        if action == "registered":
            _expect(event["revision"] == previous.revision + 1, "revision_mismatch",
                    sequence, schedule_id)
            _expect(complete or definition["overlap"] == "allow", "membership_unknown",
                    sequence, schedule_id)
        else:
            same = (event["revision"] == previous.revision
                    and definition_bytes == previous.definition_bytes
                    and event["last_at"] == previous.last_at)
            _expect(same, "definition_changed", sequence, schedule_id)
        if action == "advanced":
            moved = event["next_at"] is None or (
                previous.next_at is not None and event["next_at"] > previous.next_at)
            _expect(moved, "next_at_not_advanced", sequence, schedule_id)
        if action in ("cancelled", "checkpoint"):
            _expect(event["next_at"] == previous.next_at, "next_at_changed", sequence, schedule_id)
        if action == "checkpoint":
            _expect(event["cancelled_at"] == previous.cancelled_at, "cancelled_at_changed",
                    sequence, schedule_id)
    return ScheduleState(
        schedule_id, definition, definition_bytes, event["revision"], sequence,
        event["next_at"], event["last_at"], event["cancelled_at"], active, complete,
    )


def _apply_delivered(previous: ScheduleState | None, sequence: int, event: Event) -> ScheduleState:
    schedule_id = event["schedule_id"]
    state = _live(previous, sequence, event)
    _expect(event["revision"] == state.revision, "revision_mismatch", sequence, schedule_id)
    _expect(event["due_at"] == state.next_at, "not_the_due_occurrence", sequence, schedule_id)
    _expect(_subset(event["active"], (*state.active, event["job_id"])), "membership_grew",
            sequence, schedule_id)
    return replace(state, record_revision=sequence, next_at=event["next_at"],
                   last_at=event["due_at"], active=tuple(event["active"]))


# Legacy pairs: written before 1.8. Their membership is only the last occurrence's derived
# job id; for ``allow`` that is not complete, so tightening such a schedule is a conflict.

def _apply_legacy_registered(previous: ScheduleState | None, sequence: int,
                             event: Event) -> ScheduleState:
    _upsert_revision(previous, sequence, event)
    definition = event["definition"]
    definition_bytes = value.encode(dict(definition))
    complete = definition["overlap"] != "allow"
    if previous is not None and previous.definition_bytes == definition_bytes \
            and not previous.cancelled:
        return replace(previous, record_revision=sequence, next_at=event["next_at"])
    revision = 1 if previous is None else previous.revision + 1
    active = () if previous is None else previous.active
    if previous is not None:
        complete = complete and previous.membership_complete
    return ScheduleState(event["schedule_id"], definition, definition_bytes, revision, sequence,
                         event["next_at"], None, None, active, complete)


def _apply_legacy_advanced(previous: ScheduleState | None, sequence: int,
                           event: Event) -> ScheduleState:
    state = _live(previous, sequence, event)
    derived = schedule_timing.occurrence_job_id(state.schedule_id, event["due_at"])
    return replace(state, record_revision=sequence, next_at=event["next_at"],
                   last_at=event["due_at"], active=(derived,))


def _apply_legacy_cancelled(previous: ScheduleState | None, sequence: int,
                            event: Event) -> ScheduleState:
    state = _live(previous, sequence, event)
    return replace(state, record_revision=sequence, cancelled_at=event["at"])


_HANDLERS = {
    se.SCHEDULE_STATE: _apply_state,
    se.SCHEDULE_DELIVERED: _apply_delivered,
    se.SCHEDULE_REGISTERED: _apply_legacy_registered,
    se.SCHEDULE_ADVANCED: _apply_legacy_advanced,
    se.SCHEDULE_CANCELLED: _apply_legacy_cancelled,
}

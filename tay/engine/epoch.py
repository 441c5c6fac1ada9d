"""The engine inside a Store-v2 epoch (docs/storage-format.md, "Store v2").

Once recovery hands over the epoch's reducer (``attach_epoch``), every persistent event is
written in the epoch's logical domain: a job event is applied with S = the job's revision +
1 and journaled as an (8,1) mutation (lifecycle pairs) or a (30,2) epoch event (results,
failure details, requeues); schedule and queue events continue their entity's chain as
(30,2) events. The live path goes through the same ``EpochReducer`` methods replay calls, so
the allocator and the chain rules cannot drift; the reducer hands each new job state back
through ``epoch_install``, which is ``_install``, the one re-indexing path.

Outcome events are then the records written: pair (8,1) or (30,2), ``raw`` their payload,
``name`` and ``payload`` those of the event they carry.

This module also gives compaction what it reads from the engine (``retained_jobs``,
``checkpoints``, ``capture``) and applies what a compaction decided (``expire``).
"""

from __future__ import annotations

from operator import itemgetter
import struct
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from tay._frozen import LazyModule
from tay.engine.handlers.admin import AdminCommands
from tay.engine.effects import Outcome
from tay.engine.retained.finished import charges
from tay.engine.retained.packed import ID as PACKED_ID, PACKED, reordered
from tay.engine.retained.built import captured_state, captured_states
from tay.engine.retained.jobs import (
    INDEX_KEYS, STATE_SLOT, CompletedRow, JobEntry, LazyJobEntry, ParkedJobEntry, StartedRow,
    index_keys_for, peek,
)
from tay.engine.retained.payloads import (
    FinishedPayload, InsertedPayload, ResultPayload, StartedPayload,
)
from tay.engine.state import MAX_TIMELINE
from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.events import schedules as se
from tay.storage.events.registry import Event, EventFilling, event_with_raw
from tay.storage.events.operations import (
    CONTROL_PAIRS, queue_paused, queue_rate_limited, queue_resumed, queue_scaled,
    schedule_paused, schedule_resumed,
)
from tay.storage.events.definition import (
    ATTEMPT_MAX, MAX_ATTEMPTS, QUEUE_KEY, SCHEDULED_AT, TIME_MAX, U64_MAX, WORKER_KEY,
    LazyDefinition,
)
from tay.storage.events.transitions import STATES, TERMINAL_STATES, JobState
from tay.storage.formats.record import FIXED_SIZE as _RECORD_OVERHEAD
from tay.storage.journal.history_budget import frame_size

STATE_INDEX = {name: index for index, name in enumerate(STATES)}
_ROW_AVAILABLE = STATE_INDEX["available"]
_ROW_EXECUTING = STATE_INDEX["executing"]
_ROW_COMPLETED = STATE_INDEX["completed"]
from tay.storage.formats import value
from tay.storage.v2.epoch_records import EPOCH_EVENT_PAIR, EpochEvent, encode_epoch_event
from tay.storage.v2.manifest import Retention
from tay.storage.v2.records import MUTATION_BODY_KEYS, MUTATION_PAIR, Mutation
from tay.storage.v2.reducer import EpochReducer
from tay.storage.v2.rows import BaseJobs, BaseLiveRow, HeldJobs, JobRow
from tay._native import _pure_base as bj
from tay.storage.v2.tail import (
    ExecutingRow, FailedRow, LiveRow, TailJobs,
)

# What only a compaction reads (``checkpoints``, ``captured_plan``) loads with the first
# compaction.
if TYPE_CHECKING:
    from tay.storage.compaction import plan as compaction_plan
    from tay.storage.compaction import space as compaction_space
    from tay.storage.compaction.plan import Checkpoint
else:
    compaction_plan = LazyModule("tay.storage.compaction.plan")
    compaction_space = LazyModule("tay.storage.compaction.space")

_MUTATION_PREFIX = struct.Struct(">16sBQQQ")
_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__
assert MUTATION_PAIR == (8, 1)
# kind -> the body's keys in canonical order: the event's payload minus job_id,
# expected_revision and at (they are in the prefix), plus availability_order where it has one
_BODY_LAYOUTS = {kind: value.map_layout(keys) for kind, keys in MUTATION_BODY_KEYS.items()}


def _u64_layout(kind: int) -> struct.Struct:
    """Prefix and body of a kind whose body fields are all unsigned integers, as one struct:
    the map header and each key's bytes are constant (canonical order), each value is the
    tag 4 and eight bytes."""
    parts = [">16sBQQQ", f"{5}s"]
    for _, key in _BODY_LAYOUTS[kind]:
        parts += [f"{len(key) + 1}s", "Q"]
    return struct.Struct("".join(parts))


def _u64_constants(kind: int) -> tuple[bytes, ...]:
    """The constant pieces of ``_u64_layout(kind)``: the map header, then each key + tag."""
    layout = _BODY_LAYOUTS[kind]
    return (b"\x09" + len(layout).to_bytes(4, "big"),
            *(key + b"\x04" for _, key in layout))


# started: attempt, cycle_token; a success finish: its six fields with the three nil ones
# (diagnostic, next_attempt, next_due_at) written as constants around the three integers
_STARTED = _u64_layout(3)
_STARTED_HEAD, _STARTED_ATTEMPT, _STARTED_CYCLE = _u64_constants(3)
_FINISHED_KEYS = dict(_BODY_LAYOUTS[4])
_SUCCEEDED = struct.Struct(">16sBQQQ{}sQ{}sQ{}sQ".format(
    5 + len(_FINISHED_KEYS["diagnostic"]) + 1 + len(_FINISHED_KEYS["disposition"]) + 1,
    len(_FINISHED_KEYS["execution_token"]) + 1,
    len(_FINISHED_KEYS["next_attempt"]) + 1 + len(_FINISHED_KEYS["next_due_at"]) + 1
    + len(_FINISHED_KEYS["outcome"]) + 1))
_SUCCEEDED_HEAD = (b"\x09" + (6).to_bytes(4, "big") + _FINISHED_KEYS["diagnostic"] + b"\x00"
                   + _FINISHED_KEYS["disposition"] + b"\x04")
_SUCCEEDED_TOKEN = _FINISHED_KEYS["execution_token"] + b"\x04"
_SUCCEEDED_TAIL = (_FINISHED_KEYS["next_attempt"] + b"\x00" + _FINISHED_KEYS["next_due_at"]
                   + b"\x00" + _FINISHED_KEYS["outcome"] + b"\x04")
_INSERTED_KEYS = dict(_BODY_LAYOUTS[1])
_INSERTED_HEAD = b"\x09" + (3).to_bytes(4, "big") + _INSERTED_KEYS["availability_order"]
_U64_TAGGED = struct.Struct(">BQ")
_INSERTED_DEFINITION = _INSERTED_KEYS["definition"]
_INSERTED_ELIGIBLE_AT = _INSERTED_KEYS["eligible_at"]
_ZERO_ID = bytes(16)
_new_object = object.__new__


def _inserted_layout(size: int) -> struct.Struct:
    """A persistent insert's whole (8,1) record, available at once, with a definition of
    ``size`` canonical bytes, as one struct: the prefix, the body's map header and
    availability_order key, its tag and order, the definition key and bytes, the
    eligible_at key, its tag and time (remembered per size, bounded)."""
    layout = struct.Struct(">16sBQQQ{}sBQ{}s{}s{}sBQ".format(
        len(_INSERTED_HEAD), len(_INSERTED_DEFINITION), size, len(_INSERTED_ELIGIBLE_AT)))
    if len(_INSERTED_LAYOUTS) >= 64:
        _INSERTED_LAYOUTS.clear()  # many distinct sizes: start over, stay bounded
    _INSERTED_LAYOUTS[size] = layout
    return layout


_INSERTED_LAYOUTS: dict[int, struct.Struct] = {}
_set_row = STATE_SLOT.__set__  # the entry's state slot, below LazyJobEntry's property
_get_row = STATE_SLOT.__get__
# JobState field positions, for the fused commits that build the next state in one step
(_ID, _DEFINITION, _DEFINITION_BYTES, _STATE, _REVISION, _ATTEMPT, _NEXT_ATTEMPT, _CYCLE,
 _EXECUTION, _ELIGIBLE_AT, _READY_ORDER, _INSERTED_AT, _ATTEMPTED_AT, _COMPLETED_AT,
 _TERMINAL_AT, _DIAGNOSTIC, _RESULT_PRESENT, _RESULT, _FAILURE) = range(len(JobState._fields))


# a result_recorded (10,2) inside a (30,2): the envelope and the four keys' fixed part
# (at, expected_revision, job_id: canonical order), then the result's Value
_RESULT_KEYS = dict(value.map_layout(("at", "expected_revision", "job_id", "result")))
_RESULT_FIXED = struct.Struct(">BBQ{}sQ{}sQ{}s16s".format(
    5 + len(_RESULT_KEYS["at"]) + 1, len(_RESULT_KEYS["expected_revision"]) + 1,
    len(_RESULT_KEYS["job_id"]) + 5))
_RESULT_HEAD = b"\x09" + (4).to_bytes(4, "big") + _RESULT_KEYS["at"] + b"\x04"
_RESULT_EXPECTED = _RESULT_KEYS["expected_revision"] + b"\x04"
_RESULT_JOB_ID = _RESULT_KEYS["job_id"] + b"\x07" + (16).to_bytes(4, "big")
_NIL_RESULT = _RESULT_KEYS["result"] + b"\x00"


def result_payload(event: ev.Event, revision: int) -> bytes:
    """``encode_epoch_event(event, revision)`` of a built result_recorded event (its pair
    is carried, its revision one above its expected revision), packed in one step."""
    payload = event.payload
    result = payload["result"]
    return _RESULT_FIXED.pack(10, 2, revision, _RESULT_HEAD, payload["at"], _RESULT_EXPECTED,
                              payload["expected_revision"], _RESULT_JOB_ID,
                              payload["job_id"]) + (
        _NIL_RESULT if result is None else _RESULT_KEYS["result"] + value.encode(result))


def mutation_payload(event: ev.Event, revision: int, order: int | None) -> bytes:
    """The (8,1) payload of an already validated Event-v1 lifecycle event (§3.5).

    The per-job kinds (an insert of a live definition, a start, a success) are packed in
    one step; the others go through the field encoder. The bytes are the same either way
    (tests/engine/test_engine_epoch.py)."""
    payload = event.payload
    kind = event.type
    at = payload["at"]
    if kind == 3:
        return _STARTED.pack(payload["job_id"], 3, revision - 1, revision, at, _STARTED_HEAD,
                             _STARTED_ATTEMPT, payload["attempt"], _STARTED_CYCLE,
                             payload["cycle_token"])
    if kind == 4 and payload["diagnostic"] is None and payload["next_attempt"] is None \
            and payload["next_due_at"] is None:
        return _SUCCEEDED.pack(payload["job_id"], 4, revision - 1, revision, at,
                               _SUCCEEDED_HEAD, payload["disposition"], _SUCCEEDED_TOKEN,
                               payload["execution_token"], _SUCCEEDED_TAIL, payload["outcome"])
    prefix = _MUTATION_PREFIX.pack(payload["job_id"], kind, revision - 1, revision, at)
    if kind == 1:
        definition = payload["definition"]
        if type(definition) is LazyDefinition:  # a live definition is spliced, not re-encoded
            return b"".join((prefix, _INSERTED_HEAD,
                             b"\x00" if order is None else _U64_TAGGED.pack(4, order),
                             _INSERTED_KEYS["definition"], definition.canonical,
                             _INSERTED_KEYS["eligible_at"],
                             _U64_TAGGED.pack(4, payload["eligible_at"])))
    if kind == 1 or kind == 2 or kind == 6:
        payload = {**payload, "availability_order": order}
    return prefix + value.encode_fields(_BODY_LAYOUTS[kind], payload)


class EpochEngine(AdminCommands):
    # ---- recovery hands the epoch over ---------------------------------------------

    def epoch_job(self, job_id: bytes) -> JobState | None:
        entry = self.jobs.get(job_id)  # ``_entry`` inline: once per replayed tail record
        if entry is None and job_id in self._finished_ids:
            entry = self._thaw(job_id)
        return entry.state if entry is not None and not entry.volatile else None

    def epoch_install(self, state: JobState, event: ev.Event | None) -> None:
        if event is None:
            self._install(self.jobs.get(state.id), state, False, self._pending_nodes, 0)
        else:
            self._install_or_drop(self.jobs.get(state.id), state, event, False,
                                  self._pending_nodes, event.payload["at"])

    def epoch_install_row(self, row: JobRow) -> None:
        """A terminal base job kept as its row until first read (tay.storage.v2.rows)."""
        self._install_row(row)

    def epoch_install_rows(self, jobs: BaseJobs) -> None:
        """A run of finished base jobs from the columnar replay, kept in its columns
        (tay.engine.retained.finished) until something touches one of them."""
        self._install_columns(jobs)

    def epoch_install_base_live(self, jobs: BaseJobs, rows: list[BaseLiveRow],
                                befores: Sequence[int]) -> None:
        """A columnar base run whose live jobs stand among its finished ones: the finished
        ones kept in columns, each live one as its row (``rows[m]`` after ``befores[m]``
        of ``jobs``), every job with the stamp its snapshot's replay gives it."""
        self._install_base_live(jobs, rows, befores)

    def epoch_install_tail(self, jobs: TailJobs, inserted: list[bytes]) -> tuple[int, int] | None:
        """The done jobs of a columnar tail run, kept in columns (tay.storage.v2.tail)."""
        return self._install_tail(jobs, inserted)

    def epoch_install_live(self, row: LiveRow | ExecutingRow | FailedRow) -> None:
        """A tail job left available at its insert or retryable or discarded by a failure,
        held as its row until read, or executing at its start (tay.storage.v2.tail); the
        counters are where its last record's replay would find them."""
        self._install_live(row)

    def epoch_counters(self, stamp: int, ready: int, skipped_timers: int = 0) -> None:
        """The admin-index stamp and ready counter the next replayed record continues from
        (the columnar tail replay positions them as the record-by-record replay has them);
        ``skipped_timers``: timer pushes that replay made since the last call for records
        held in columns or rows (a done delayed job's insert, a retried success's failure),
        which the timer tiebreak moves past so that every later entry gets the counter
        replay gives it."""
        self._stamp = stamp
        self._ready_counter = ready
        if skipped_timers:
            self._timers.skip(skipped_timers)

    def epoch_entity(self, revision: int, event: ev.Event) -> None:
        if event.pair in se.SCHEDULE_PAIRS:
            self._apply_schedule(revision, event)
        elif event.pair in CONTROL_PAIRS:
            self._apply_control(event)
        else:
            raise RecoveryRefused("unsupported_semantics", "not_an_engine_entity",
                                  event_type=event.type, schema=event.schema)

    def attach_epoch(self, reducer: EpochReducer, next_sequence: int) -> None:
        """Write in the epoch's logical domain from now on (the server, after recovery).

        ``reducer`` is where the epoch's replay left the allocator and the entity chains;
        the engine continues them with a reducer of its own (bound to itself, not to
        whatever consumer recovery went through)."""
        own = self.new_epoch_reducer()
        own.in_base = False
        own.next_order = reducer.next_order
        own.entities = dict(reducer.entities)
        self.epoch = own
        self.next_sequence = next_sequence

    def new_epoch_reducer(self) -> EpochReducer:
        return EpochReducer(self.epoch_job, self.epoch_install, self.epoch_entity,
                            drop_held=self.epoch_drop_held)

    def epoch_drop_held(self, job_id: bytes, expected_revision: int) -> bool:
        """A deletion of a job held finished without an entry (in columns or packed),
        read in place: dropped when the deletion's transition accepts it (a terminal state
        at ``expected_revision``), without building the job; False otherwise (the
        deletion then takes the job out, and apply accepts or refuses it)."""
        if job_id in self.jobs:
            return False
        found = self.finished.where(job_id)
        if found is None:
            return False
        held, k = found
        if held.revision(k) != expected_revision or held.state(k) not in TERMINAL_STATES:
            return False
        self.remove_job(job_id)
        return True

    # ---- the live path -----------------------------------------------------------------

    def _commit_in_epoch(self, entry: JobEntry | None, event: ev.Event, out: Outcome,
                         nodes: int | None, revision: int | None = None) -> JobState | None:
        """``revision``: the record's, when ``entry`` cannot say it (a held job's deletion);
        None for a job's deletion that the reducer dropped where it was held."""
        if revision is None:
            revision = 1 if entry is None else entry.state.revision + 1
        reducer = self.epoch
        payload = event.payload
        kind = event.type
        history = self.history
        if kind <= 6 and event.schema == 1:  # a lifecycle pair (1..6, 1): an (8,1) mutation
            at = payload["at"]
            if kind == 2 or kind == 6 or (kind == 1 and payload["eligible_at"] <= at):
                order = reducer.next_order  # it leaves the job available
            else:
                order = None
            raw = mutation_payload(event, revision, order)
            record = event_with_raw(8, 1, event.name, payload, raw)  # MUTATION_PAIR
            if history is not None:
                if history.uncapped or kind == 4:  # nothing to refuse: accounted only
                    history.account_payload(len(raw))
                else:
                    self._charge_frame(event, len(raw))
            self._pending_nodes = nodes
            try:
                state = reducer.mutation(_new_tuple(Mutation, (payload["job_id"], kind,
                                                               revision - 1, revision, at,
                                                               order, event)))
            finally:
                self._pending_nodes = None
        else:
            result = kind == 10 and event.schema == 2  # RESULT_RECORDED
            raw = result_payload(event, revision) if result \
                else encode_epoch_event(event, revision)
            record = event_with_raw(30, 2, event.name, payload, raw)  # EPOCH_EVENT_PAIR
            if history is not None and (history.uncapped or result):
                history.account_payload(len(raw))  # a result ends an execution: accounted
            else:
                self._charge_frame(event, len(raw))
            self._pending_nodes = nodes
            try:
                state = reducer.event(_new_tuple(EpochEvent, (
                    event, revision, ev.epoch_carry((kind, event.schema)))))
            finally:
                self._pending_nodes = None
        sequence = self.next_sequence
        out.events.append((sequence, record))
        self.next_sequence = sequence + 1
        return state

    def commit_held_deletion(self, event: ev.Event, out: Outcome) -> None:
        """A (29,2) deletion of a job held finished without an entry (in columns or
        packed), committed as ``_commit`` commits it but not built first: through
        ``_commit_in_epoch`` with the record's revision from the event, where the reducer
        drops the held job (``epoch_drop_held``) as ``_install_or_drop`` drops a built one."""
        if self.epoch is None:  # (no Store-v2 epoch: the general way)
            self._commit(self._entry(event.payload["job_id"]), event, False, out)
            return
        # (were it not held as read, the reducer would take the general way: lookup, apply)
        self._commit_in_epoch(None, event, out, None,
                              revision=event.payload["expected_revision"] + 1)

    # ---- the fused per-job commits ------------------------------------------------------
    #
    # An insert, a start and a success with a nil result are three of a job's four records
    # and most of its engine time. Each has a fused commit here: one function builds its
    # record(s) and bytes, the next JobState and the index changes, with no event builder,
    # Mutation, reducer or ``apply`` call in between. Each is the general path (event
    # builder -> ``_commit`` -> ``_commit_in_epoch`` -> ``EpochReducer.mutation``/``event``
    # -> ``apply`` -> ``_install``) specialised to the one transition it makes, and runs only
    # where that path would certainly accept it (else the caller takes the general path,
    # which also refuses or rejects exactly as before). Replay never comes here: it stays on
    # ``apply``. tests/engine/test_fused_commits.py drives a fused and a general engine with
    # the same random commands and requires the same records and bytes, replies, effects and
    # engine state after every step.

    fused = True  # False: every commit takes the general path (the tests' reference twin)

    def _insert_fused(self, job_id: bytes, at: int, definition: Any, charge: int,
                      out: Outcome) -> JobEntry | None:
        """A persistent insert's (8,1) commit; None when it is not the common case.
        ``charge``: the job's state-budget charge, ``job_charge(len(definition.canonical),
        definition_nodes(definition))``, which the caller admitted already."""
        if type(definition) is not LazyDefinition:
            return None
        reducer = self.epoch
        scheduled_at = definition.scalars[SCHEDULED_AT]
        eligible_at = at if scheduled_at is None else scheduled_at
        if not (type(at) is int and 0 <= at <= TIME_MAX
                and type(eligible_at) is int and 0 <= eligible_at <= TIME_MAX
                and type(job_id) is bytes and len(job_id) == 16 and job_id != _ZERO_ID
                and not reducer.in_base and job_id not in self.jobs
                and job_id not in self._finished_ids):
            return None
        available = eligible_at <= at
        order = reducer.next_order if available else None
        canonical = definition.canonical
        if order is None:
            raw = b"".join((_MUTATION_PREFIX.pack(job_id, 1, 0, 1, at), _INSERTED_HEAD,
                            b"\x00", _INSERTED_DEFINITION, canonical, _INSERTED_ELIGIBLE_AT,
                            _U64_TAGGED.pack(4, eligible_at)))
        else:  # available at once: the whole record in one pack
            layout = _INSERTED_LAYOUTS.get(len(canonical)) or _inserted_layout(len(canonical))
            raw = layout.pack(job_id, 1, 0, 1, at, _INSERTED_HEAD, 4, order,
                              _INSERTED_DEFINITION, canonical, _INSERTED_ELIGIBLE_AT,
                              4, eligible_at)
        history = self.history
        if history is not None:  # an admission: may refuse, before anything changed
            if history.uncapped:  # nothing to refuse: the frame accounted, placed later
                history.unplaced = unplaced = history.unplaced + _RECORD_OVERHEAD + len(raw)
                if unplaced > history.room:
                    history.place(_RECORD_OVERHEAD + len(raw))
            else:
                history.admit((frame_size(len(raw)),), self.durable_executing)
        if order is not None:
            reducer.next_order = order + 1
        name = "available" if available else "scheduled"
        state = _new_tuple(JobState, (
            job_id, definition, canonical, name, 1, 0, 1,
            1, None, eligible_at, order, at, None, None, None, None, False, None, None))
        # ``_install`` of a new persistent job, inline (one call less per job): the charge,
        # the queue row (the counts are its sums), the stamp and index, then the ready heap
        # or the timer.
        # ``JobEntry(state, False, charge)``, its ``__init__`` inline (a live definition)
        entry = _new_object(JobEntry)
        entry.state = state
        entry.volatile = False
        entry.charge = charge
        entry.margin = 0
        entry.ready_key = None
        entry.reservation_id = None
        scalars = definition.scalars
        entry.queue = queue = scalars[QUEUE_KEY]
        entry.task = task = scalars[WORKER_KEY]
        entry.stamp = 0
        entry.attempts = None
        entry.schedule_id = None
        entry.index_keys = INDEX_KEYS.get((queue, task)) or index_keys_for(queue, task)
        self.jobs[job_id] = entry
        budget = self.budget  # ``budget.charge(charge, admitted=True)``, inline
        budget.used += charge
        budget.admitted += charge
        queue_counts = self.queue_counts
        row = entry.queue_row = queue_counts.get(queue) \
            or queue_counts.setdefault(queue, [0] * len(STATES))
        row[STATE_INDEX[name]] += 1
        self._stamp = stamp = self._stamp + 1
        entry.stamp = stamp
        if self._job_index is not None:
            self._job_index.touch(stamp, job_id, name, entry.index_keys, None)
        if available:
            self._ready_counter = counter = self._ready_counter + 1
            key = entry.ready_key = (eligible_at, counter, job_id)
            self._ready.push(queue, task, key)
        else:
            self._timers.push(eligible_at, (job_id, 1))
        if self.parking is not None:  # parked by a later round if it still waits
            self.parking.append(job_id)
        sequence = self.next_sequence
        payload = InsertedPayload()  # fields_payload, inline
        payload.fields = (at, definition, eligible_at, 0, job_id)
        event = EventFilling()  # ``event_with_raw``, inline (one call less per job)
        event.type = 8
        event.schema = 1
        event.name = "job_inserted"
        event.payload = payload
        event.raw = raw
        event.__class__ = Event
        out.events.append((sequence, event))
        self.next_sequence = sequence + 1
        self.activity.enqueued(queue, task, at)
        return entry

    def _start_fused(self, entry: JobEntry, job: JobState, at: int, out: Outcome) -> bool:
        """A start's (8,1) commit and re-index (``_install`` of available -> executing,
        inline); False, changing nothing, when it is not the common case."""
        revision = job[_REVISION] + 1
        attempt = job[_NEXT_ATTEMPT]
        cycle = job[_CYCLE]
        definition = job[_DEFINITION]
        max_attempts = definition.scalars[MAX_ATTEMPTS] \
            if type(definition) is LazyDefinition else definition["max_attempts"]
        if not (job[_STATE] == "available" and type(at) is int and 0 <= at <= TIME_MAX
                and job[_ELIGIBLE_AT] is not None and at >= job[_ELIGIBLE_AT]
                and type(attempt) is int and 1 <= attempt <= max_attempts
                and attempt <= ATTEMPT_MAX and revision <= U64_MAX
                and not self.epoch.in_base):
            return False
        job_id = job[_ID]
        raw = _STARTED.pack(job_id, 3, revision - 1, revision, at, _STARTED_HEAD,
                            _STARTED_ATTEMPT, attempt, _STARTED_CYCLE, cycle)
        history = self.history
        if history is not None:  # an admission counting this execution's reserve
            if history.uncapped:  # nothing to refuse: the frame accounted, placed later
                history.unplaced = unplaced = history.unplaced + _RECORD_OVERHEAD + len(raw)
                if unplaced > history.room:
                    history.place(_RECORD_OVERHEAD + len(raw))
            else:
                history.admit((frame_size(len(raw)),), self.durable_executing + 1)
        # the executing job kept as a row (tay.engine.retained.jobs.StartedRow): its JobState is
        # built only if something reads ``entry.state`` before the fused success
        entry.state = _new_tuple(StartedRow, (job, revision, attempt, at))  # a JobEntry here:
        entry.__class__ = LazyJobEntry  # `_start` read its state (a plain slot store)
        # ``_moved(entry, job_id, "available", "executing")``, inline (one call less per job)
        row = entry.queue_row
        row[_ROW_AVAILABLE] -= 1
        row[_ROW_EXECUTING] += 1
        self._stamp = stamp = self._stamp + 1
        entry.stamp = stamp
        if self._job_index is not None:
            self._job_index.touch(stamp, job_id, "executing", entry.index_keys, "available")
        entry.ready_key = None
        attempts = entry.attempts  # _start_attempt; a first timeline is the row's (timeline)
        if attempts is not None:
            entry.attempts = attempts[1 - MAX_TIMELINE:] + ((attempt, at, None, None),)
        self.durable_executing += 1
        sequence = self.next_sequence
        payload = StartedPayload()  # fields_payload, inline
        payload.fields = (at, attempt, cycle, revision - 1, job_id)
        event = EventFilling()  # ``event_with_raw``, inline (one call less per job)
        event.type = 8
        event.schema = 1
        event.name = "job_started"
        event.payload = payload
        event.raw = raw
        event.__class__ = Event
        out.events.append((sequence, event))
        self.next_sequence = sequence + 1
        return True

    def _succeed_fused(self, entry: JobEntry, at: int, out: Outcome) -> bool:
        """A success with a nil result: its (30,2) result and (8,1) finish records, in that
        order (a batch cut between them leaves the job executing, never completed without
        its result), and the job installed once as completed with the result (the general
        path installs the result, then the finish: the same counts, stamp, timeline and
        charges); False, changing nothing, when it is not the common case."""
        row = _get_row(entry)
        if type(row) is StartedRow:  # the fused start's row: the execution is its revision
            job, execution, attempt, attempted_at = row
            if job[_RESULT_PRESENT] or not (type(at) is int and 0 <= at <= TIME_MAX) \
                    or execution >= U64_MAX - 1 or self.epoch.in_base:
                return False
            revision = execution + 1  # the result; the finish is revision + 1
            job_id = job[_ID]
        else:
            job = entry.state
            execution = job[_EXECUTION]
            revision = job[_REVISION] + 1  # the result; the finish is revision + 1
            if not (job[_STATE] == "executing" and not job[_RESULT_PRESENT]
                    and type(at) is int and 0 <= at <= TIME_MAX
                    and type(execution) is int and 1 <= execution <= U64_MAX
                    and revision < U64_MAX and not self.epoch.in_base):
                return False
            job_id = job[_ID]
            attempt = None
        result = _RESULT_FIXED.pack(10, 2, revision, _RESULT_HEAD, at, _RESULT_EXPECTED,
                                    revision - 1, _RESULT_JOB_ID, job_id) + _NIL_RESULT
        finish = _SUCCEEDED.pack(job_id, 4, revision, revision + 1, at, _SUCCEEDED_HEAD,
                                 ev.COMPLETED, _SUCCEEDED_TOKEN, execution, _SUCCEEDED_TAIL,
                                 ev.SUCCESS)
        history = self.history
        if history is not None:  # the end of an execution: accounted, never refused
            if history.uncapped:  # both frames accounted, placed later
                history.unplaced = unplaced = \
                    history.unplaced + 2 * _RECORD_OVERHEAD + len(result) + len(finish)
                if unplaced > history.room:
                    history.place(_RECORD_OVERHEAD + len(result), _RECORD_OVERHEAD + len(finish))
            else:
                history.account_payloads(len(result), len(finish))
        # the completed JobState in one tuple (no list copy and field stores): state,
        # revision, next attempt, execution, eligible_at, completed/terminal times and
        # result_present change; every other field is the executing job's
        if attempt is not None:  # kept a row: the JobState is built when read (CompletedRow)
            _set_row(entry, _new_tuple(CompletedRow, (job, execution, attempt, attempted_at,
                                                      at)))
        else:
            (_, definition, canonical, _, _, attempt, _, cycle, _, _, order, inserted_at,
             attempted_at, _, _, diagnostic, _, result_value, failure) = job
            entry.state = _new_tuple(JobState, (
                job_id, definition, canonical, "completed", revision + 1, attempt, None, cycle,
                None, None, order, inserted_at, attempted_at, at, at, diagnostic, True,
                result_value, failure))
        self.durable_executing -= 1
        attempts = entry.attempts  # _finish_attempt (None: the row's, CompletedRow.timeline)
        if attempts and attempts[-1][2] is None:
            entry.attempts = attempts[:-1] + ((attempts[-1][0], attempts[-1][1], at,
                                               "completed"),)
        # ``_moved(entry, job_id, "executing", "completed")``, inline (one call less per job)
        row = entry.queue_row
        row[_ROW_EXECUTING] -= 1
        row[_ROW_COMPLETED] += 1
        self._stamp = stamp = self._stamp + 1
        entry.stamp = stamp
        if self._job_index is not None:
            self._job_index.touch(stamp, job_id, "completed", entry.index_keys, "executing")
        if self.finishing is not None:  # packed by a later round (EngineState.pack_finished)
            self.finishing.append(job_id)
        entry.ready_key = None
        entry.charge += 1  # _charge_attachments: a nil result's one byte
        entry.margin += 1
        self.budget.used += 1  # ``budget.charge(1)``, inline: a margin, not admitted
        sequence = self.next_sequence
        recorded = ResultPayload()  # fields_payload, inline
        recorded.fields = (at, revision - 1, job_id, None)
        payload = FinishedPayload()
        payload.fields = (at, None, ev.COMPLETED, execution, revision, job_id, None, None,
                          ev.SUCCESS)
        # the two events, ``event_with_raw`` inline (two calls less per job)
        first = EventFilling()
        first.type = 30
        first.schema = 2
        first.name = "result_recorded"
        first.payload = recorded
        first.raw = result
        first.__class__ = Event
        second = EventFilling()
        second.type = 8
        second.schema = 1
        second.name = "job_finished"
        second.payload = payload
        second.raw = finish
        second.__class__ = Event
        out.events += ((sequence, first), (sequence + 1, second))
        self.next_sequence = sequence + 2
        self.activity.completed(entry.queue, entry.task, at, at - attempted_at)
        return True

    def _commit_entity(self, event: ev.Event, out: Outcome) -> None:
        """A schedule or queue event continuing its entity's chain as a (30,2) record."""
        carry = ev.epoch_carry(event.pair)
        revision = self.epoch.entity_revision(carry.entity(event.payload)) + 1
        raw = encode_epoch_event(event, revision)
        self._charge_frame(event, len(raw))  # an admission: may refuse, changing nothing
        self.epoch.event(EpochEvent(event, revision, carry))
        out.events.append((self.next_sequence,
                           ev.Event(*EPOCH_EVENT_PAIR, event.name, event.payload, raw)))
        self.next_sequence += 1

    # ---- what a compaction reads and decides --------------------------------------------

    def retained_jobs(self) -> list[JobState]:
        """Every persistent job's durable state (volatile jobs stay out of the store), in no
        particular order; the jobs held in columns or packed are built for the list, not
        kept."""
        from tay.storage.compaction.verify import built  # a chunk of rows in one decode

        captured = self.captured_jobs()
        return list(built(captured.jobs, captured.states_of))

    def captured_jobs(self) -> CapturedJobs:
        """``retained_jobs`` as an online compaction captures them on the loop, without
        building any (``CapturedJobs``)."""
        finished = self.finished
        jobs: list[Any] = [_get_row(entry) for entry in self.jobs.values()
                           if not entry.volatile]
        runs = []
        for run, held in finished.held_runs():
            place = len(runs) << _RUN_SHIFT
            runs.append(run)
            jobs += [place | k for k in held]
        jobs += finished.packed.values()
        return CapturedJobs(jobs, tuple(runs), finished.texts)

    def captured_jobs_of(self, job_ids: Sequence[bytes]) -> CapturedJobs:
        """``captured_jobs`` of just ``job_ids``, in that order (None for one not retained,
        or volatile): what a compaction's switch compares the replayed catch-up with, taken
        without building or taking out any job on the loop (a packed or held job read there
        was taken out of its tuple or run, tens of thousands of them after a busy
        compaction)."""
        finished = self.finished
        jobs: list[Any] = []
        places: dict[int, int] = {}  # id(run) -> its place in runs
        runs: list[Any] = []
        for job_id in job_ids:
            entry = self.jobs.get(job_id)
            if entry is not None:
                jobs.append(None if entry.volatile else _get_row(entry))
                continue
            found = finished.where(job_id)
            if found is None:
                jobs.append(None)
            elif found[0] is PACKED:
                jobs.append(found[1])
            else:
                run, k = found
                place = places.get(id(run))
                if place is None:
                    place = places[id(run)] = len(runs)
                    runs.append(run)
                jobs.append(place << _RUN_SHIFT | k)
        return CapturedJobs(jobs, tuple(runs), finished.texts)

    def checkpoints(self, captured_at: int) -> list[Checkpoint]:
        """One creating event per non-job entity, at the revision its chain has reached."""
        reducer = self.epoch
        out: list[Checkpoint] = []
        for state in self.schedules.states().values():
            revision = (reducer.entity_revision(("schedule", state.schedule_id))
                        if reducer is not None else state.record_revision)
            out.append(compaction_plan.Checkpoint(se.schedule_state(
                action="checkpoint", schedule_id=state.schedule_id, at=captured_at,
                definition=state.definition, revision=state.revision, expected_revision=0,
                next_at=state.next_at, last_at=state.last_at, cancelled_at=state.cancelled_at,
                active=state.active, membership_complete=state.membership_complete), revision))
        # what an operator set: every schedule and queue ever paused (paused or resumed now),
        # every queue ever scaled (its runtime credits, or nil: the configured ones) and
        # every queue ever rate-limited (its limit, or nil), each at the revision its chain
        # has reached
        schedules_paused, paused, scaled = self.schedules.paused, self.paused, self.scaled
        limits = self.rates.limits
        for kind, now_set, checkpoint in (
                ("schedule_pause", schedules_paused, lambda key: (
                    schedule_paused if key in schedules_paused else schedule_resumed)(
                        key, captured_at)),
                ("queue", paused, lambda key: (
                    queue_paused if key in paused else queue_resumed)(key, captured_at)),
                ("queue_scale", scaled, lambda key: queue_scaled(key, scaled.get(key),
                                                                 captured_at)),
                ("queue_rate", limits, lambda key: queue_rate_limited(
                    key, *limits.get(key, (None, None)), captured_at))):
            keys = set(now_set)
            if reducer is not None:
                keys |= {key for entity_kind, key in reducer.entities if entity_kind == kind}
            for key in sorted(keys):
                revision = reducer.entity_revision((kind, key)) if reducer is not None else 1
                out.append(compaction_plan.Checkpoint(checkpoint(key), max(revision, 1)))
        # each recorded day's totals (what its last (32,2) said, not what was counted since:
        # the tail after the capture records that)
        for day, event in self.day_history.checkpoints(captured_at).items():
            revision = reducer.entity_revision(("day", day)) if reducer is not None else 1
            out.append(compaction_plan.Checkpoint(event, max(revision, 1)))
        return out

    def online_capture(self) -> tuple[CapturedJobs, int]:
        """What an online compaction freezes on the loop: every persistent job as a value
        the compaction process builds (``captured_jobs``: immutable values, so the list is a
        snapshot) and the availability allocator."""
        assert self.epoch is not None, "online compaction needs a Store-v2 epoch"
        return self.captured_jobs(), self.epoch.next_order

    def stale_expiries(self, expired: dict[bytes, int],
                       touched: set[bytes] | None = None) -> list[bytes]:
        """Jobs a compaction planned to expire that changed since its capture (a retried
        discarded job): the new base does not hold them, so that compaction must not
        publish. ``touched``: the ids of the jobs the records written since the capture
        change (a job changes only through a record), so only those are looked at; None:
        every planned one."""
        stale = []
        finished = self.finished
        if touched is not None:
            expired = {job_id: expired[job_id] for job_id in touched if job_id in expired}
        for job_id, revision in expired.items():
            entry = self.jobs.get(job_id)
            if entry is None:
                found = finished.where(job_id)  # a held job is terminal
                if found is None or found[0].revision(found[1]) != revision:
                    stale.append(job_id)
            elif peek(entry).revision != revision or not peek(entry).terminal:
                stale.append(job_id)
        return stale

    def adopt_compaction(self, expired: list[bytes], order_from: int, order_shift: int,
                         next_sequence: int, touched: Iterable[bytes] | None = None) -> int:
        """The engine follows a published online compaction: expired jobs are dropped,
        orders given out since the capture (``>= order_from``) move down by
        ``order_shift`` like the allocator (see ``tay.storage.compaction.online``), and
        sequences continue the new epoch's tail. Returns how many jobs expired.

        ``touched``: the ids of the jobs the records since the capture changed. An order
        given out since then came with such a record, so only those jobs are looked at
        (with 100,000 jobs waiting, the pass over all of them held the switch ~60 ms);
        None: every job."""
        if order_shift:
            jobs = self.jobs
            entries = jobs.values() if touched is None else \
                [entry for entry in map(jobs.get, touched) if entry is not None]
            for entry in entries:
                state = peek(entry)  # a terminal row has no order: it stays a row
                if state.ready_order is not None and state.ready_order >= order_from \
                        and not entry.volatile:
                    if type(entry) is ParkedJobEntry:  # moved in its tuple, still parked
                        _set_row(entry, reordered(_get_row(entry),
                                                  state.ready_order - order_shift))
                        continue
                    state = entry.state  # a held available job (a LiveRow) is built
                    entry.state = state._replace(ready_order=state.ready_order - order_shift)
            self.epoch.next_order -= order_shift
        self.next_sequence = next_sequence
        return self.expire(expired)

    def expirable(self, retention: Retention, at: int) -> tuple[int, int | None]:
        """(state-budget bytes of the terminal jobs a compaction at ``at`` would expire
        under ``retention``, the time the earliest of the other terminal jobs expires; None
        when none will). One pass over the jobs; the state trigger backs off after it."""
        duration = retention.duration_ms
        counts = self.counts
        if duration is None or not (counts["completed"] or counts["cancelled"]
                                    or counts["discarded"]):
            return 0, None
        released = 0
        earliest = None
        for entry in self.jobs.values():
            if type(entry) is ParkedJobEntry:  # a waiting job: nothing to expire
                continue
            state = peek(entry)
            terminal_at = state.terminal_at
            if terminal_at is None or entry.volatile or not state.terminal:
                continue
            if retention.expires(terminal_at, at):
                released += entry.charge
            elif earliest is None or terminal_at < earliest:
                earliest = terminal_at
        for jobs, k in self.finished.held():  # all terminal and persistent
            terminal_at = jobs.terminal_at(k)
            if retention.expires(terminal_at, at):
                released += charges(jobs, k)[0]
            elif earliest is None or terminal_at < earliest:
                earliest = terminal_at
        return released, None if earliest is None else earliest + duration

    def oldest_terminal(self) -> int | None:
        """The earliest ``terminal_at`` of the persistent terminal jobs held (None: none
        is): when the retention trigger is due. One pass over the jobs."""
        counts = self.counts
        oldest = None
        if counts["completed"] or counts["cancelled"] or counts["discarded"]:
            for entry in self.jobs.values():
                if entry.volatile or type(entry) is ParkedJobEntry:  # not terminal
                    continue
                state = peek(entry)
                terminal_at = state.terminal_at
                if terminal_at is not None and state.terminal \
                        and (oldest is None or terminal_at < oldest):
                    oldest = terminal_at
        for jobs, k in self.finished.held():  # all terminal and persistent
            terminal_at = jobs.terminal_at(k)
            if oldest is None or terminal_at < oldest:
                oldest = terminal_at
        return oldest

    def expire(self, job_ids: list[bytes]) -> int:
        """Drop jobs a published compaction no longer retains: their id, definition, result
        and state-budget charge are released. Returns how many were dropped."""
        dropped = 0
        # the ids dropped, in the order named: they retire from the timer heap, so that a
        # new job under one does not meet the old job's entries
        gone: list[bytes] = []
        packed = self.finished.packed
        packed_ids = []
        for job_id in job_ids:
            entry = self.jobs.get(job_id)
            if entry is None:  # held in columns or packed: dropped in place
                if job_id in packed:
                    packed_ids.append(job_id)  # dropped together below
                    gone.append(job_id)
                elif self._drop_held(job_id):
                    gone.append(job_id)
                    dropped += 1
            elif not entry.volatile and peek(entry).terminal:
                self._drop(job_id, entry)
                gone.append(job_id)
                dropped += 1
        self._timers.retire(gone)
        return dropped + self._drop_packed(packed_ids)


_RUN_SHIFT = 32  # a held job captured as an int: its run's place, then its index in it
_INDEX_MASK = (1 << _RUN_SHIFT) - 1


class CapturedJobs:
    """What an online compaction captures of the engine's jobs on the loop (``jobs``:
    immutable values) and how the compaction process reads them (``id_of``, ``plan_of``,
    ``state_of``, ``states_of``). A job in the engine's table is what its state slot holds
    (its JobState, the row it is built from, or a parked job's tuple: none is built or
    unparked), a packed job its tuple, and a job held in a run of columns (a restart's base
    or tail, tay.engine.retained.finished) one int: its run's place in ``runs`` and its
    index there. Its row (its snapshot and attachments, read from the run) is made in
    the compaction process, a chunk at a time, so the capture makes no object for a held job
    and reads nothing with the loop stopped (making the rows there took ~12 µs a job: over
    a second for 100,000). A run's bytes and columns do not change while it is captured,
    whatever the engine takes out of it meanwhile."""

    __slots__ = ("jobs", "runs", "texts")

    def __init__(self, jobs: list[Any], runs: tuple[Any, ...], texts: dict[bytes, str]) -> None:
        self.jobs = jobs
        self.runs = runs
        self.texts = texts  # the engine's decoded keys (tay.engine.retained.finished)

    def row(self, job: int) -> Any:
        """The row of a held job (an int of ``jobs``), read from its run."""
        return self.runs[job >> _RUN_SHIFT].row(job & _INDEX_MASK, self.texts)

    def id_of(self, job: Any) -> bytes:
        """The id of one of ``jobs``, without building its JobState."""
        if type(job) is int:
            return self.runs[job >> _RUN_SHIFT].job_id(job & _INDEX_MASK)
        return captured_id(job)

    def state_of(self, job: Any) -> JobState:
        return captured_state(self.row(job) if type(job) is int else job)

    def states_of(self, jobs: Sequence[Any]) -> list[JobState]:
        """``state_of`` of each of ``jobs``, the held ones' rows built together."""
        return captured_states([self.row(job) if type(job) is int else job for job in jobs])

    def plan_of(self, job: Any) -> tuple[Any, int] | None:
        """``captured_plan``; a job held in a base run's columns is planned from them,
        without reading its payloads (a tail run's row is made)."""
        if type(job) is int:
            run, k = self.runs[job >> _RUN_SHIFT], job & _INDEX_MASK
            if type(run) is not HeldJobs and type(run) is not BaseJobs:
                return captured_plan(run.row(k, self.texts))
            columns = run.columns
            at = k * bj.BASE_JOB
            return _HeldPlan((run.job_id(k), run.state(k), run.revision(k),
                              run.terminal_at(k))), compaction_space.estimate_bytes(
                columns[at + bj.DEFINITION_LENGTH],
                columns[at + bj.RESULT_BYTES] if columns[at + bj.RESULT_LENGTH] else None)
        return captured_plan(job)


class _HeldPlan(tuple):
    """What the plan reads of a held job, from its run's columns: (id, state, revision,
    terminal_at), under the names its JobState has."""

    __slots__ = ()
    id = property(itemgetter(0))
    state = property(itemgetter(1))
    revision = property(itemgetter(2))
    terminal_at = property(itemgetter(3))


def captured_plan(job: Any) -> tuple[Any, int] | None:
    """What a compaction's plan reads of one of ``captured_jobs`` without building it: a
    held row (its id, state, revision and terminal_at are its JobState's) and its
    ``estimate_job_bytes``; None for the others (built: a live job's JobState is itself, a
    packed tuple's is cheap)."""
    if not isinstance(job, JobRow):
        return None
    return job, compaction_space.estimate_bytes(
        job.definition_length, job.result_bytes if job.result_present else None)


def captured_id(job: Any) -> bytes:
    """The id of one of ``captured_jobs``, without building its JobState."""
    return job[PACKED_ID] if type(job) is tuple else job.id

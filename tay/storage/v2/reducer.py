"""The Store-v2 logical reducer (storage.md §3.6), generalized to tay's epoch events.

One ``EpochReducer`` turns the records of one epoch, in order, into durable state:

* base: (7,1) snapshots in strictly ascending job id, each followed by its (31,2)
  attachments, then (30,2) checkpoints of the other entities (schedules, ...);
* tail: (8,1) mutations and (30,2) epoch events.

Revisions are logical per entity: a job's S is its mutation's ``new_revision`` (one more than
its current revision), and every (30,2) event continues its entity's chain the same way. The
job transition function is the one ``transitions.apply`` (live and replay share it); the
reducer adds the availability allocator and the chain checks.

The reducer owns no job table. It reads a job's previous state through ``lookup`` and hands
every new state to ``install``; other entities go to ``apply_entity(S, event)``. The
engine's live Store-v2 path and recovery drive the same methods. A consumer that keeps
terminal base jobs as rows (``tay.storage.v2.rows``) passes ``install_row``; the base rules
are checked on a row's fields, and anything a row cannot decide builds the job first.
"""

from __future__ import annotations

from collections.abc import Callable

from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.events.registry import job_entity
from tay.storage.events.transitions import JobState, apply, attach, with_ready_order
from tay.storage.v2.epoch_records import EpochEvent
from tay.storage.v2.jobs import job_of
from tay.storage.v2.records import Mutation, Snapshot
from tay.storage.v2.rows import BaseJobs, BaseLiveRow, JobRow, ResultRow

_DELETED_TYPE = ev.JOB_DELETED[0]  # (29,2): no other job-scoped pair has the type

Lookup = Callable[[bytes], "JobState | None"]
Install = Callable[[JobState, "ev.Event | None"], None]  # the event that led to it
ApplyEntity = Callable[[int, ev.Event], None]
InstallRow = Callable[[JobRow], None]
InstallRows = Callable[[BaseJobs], None]


def rejected(reason: str, **extra: object) -> RecoveryRefused:
    return RecoveryRefused("consumer_rejected", reason, **extra)


class EpochReducer:
    """Logical revisions, the availability allocator and the entity chains of one epoch."""

    def __init__(self, lookup: Lookup, install: Install, apply_entity: ApplyEntity,
                 install_row: InstallRow | None = None,
                 install_rows: InstallRows | None = None,
                 install_tail: Callable | None = None,
                 counters: Callable[[int, int, int], None] | None = None,
                 install_live: Callable | None = None,
                 install_base_live: Callable | None = None,
                 drop_held: Callable[[bytes, int], bool] | None = None) -> None:
        self.lookup = lookup
        self.install = install
        self.apply_entity = apply_entity
        self.install_row = install_row
        self.install_rows = install_rows
        # the columnar tail replay (tay.storage.v2.tail): install_tail(jobs, inserted) ->
        # the consumer's (stamp, ready) counters before the run, or None when an inserted id
        # is held already; counters(stamp, ready, skipped_timers) positions them for the
        # next record (skipped_timers: timer pushes replay made since the last call for
        # records held in columns, which the consumer's timer tiebreak must move past)
        self.install_tail = install_tail
        self.counters = counters
        # install_live(row): a tail job the walk left available at its insert, held as its
        # LiveRow (tay.storage.v2.tail) instead of replaying the insert; None: replayed
        self.install_live = install_live
        # install_base_live(jobs, rows, befores): a base run's finished jobs in columns and
        # its live jobs as rows (BaseLiveRow), rows[m] coming after befores[m] of the jobs;
        # None: the columnar replay takes no live base job
        self.install_base_live = install_base_live
        # drop_held(job_id, expected_revision): a deletion (29,2) of a job the consumer
        # holds finished without building it (in columns, packed), dropped there when its
        # state and revision are the ones the deletion's transition accepts: True; False
        # leaves the deletion to lookup, apply and install (which refuse what they refuse)
        self.drop_held = drop_held
        self.next_order = 1
        self.entities: dict[tuple, int] = {}  # entity -> its logical revision
        self.in_base = True
        # the snapshot whose attachments may follow (a JobRow: not built yet)
        self._pending: JobState | JobRow | None = None
        self._last_job_id: bytes | None = None
        self._checkpoints_started = False
        self._base_orders: set[int] = set()

    # ---- base -----------------------------------------------------------------------

    def snapshot(self, snapshot: Snapshot) -> None:
        self.snapshot_state(job_of(snapshot))

    def snapshot_state(self, job: JobState | JobRow) -> None:
        """A base job as its snapshot describes it (``job_of``; the replay fast path builds
        it from the native scan's row directly), or a terminal one as its ``JobRow``."""
        self._require_base("snapshot")
        if self._checkpoints_started:
            raise rejected("snapshot_after_checkpoint", job_id=job.id.hex())
        if self._last_job_id is not None and not job.id > self._last_job_id:
            raise rejected("base_not_ascending", job_id=job.id.hex())
        order = job.ready_order  # the snapshot's availability_order (a row's is None)
        if order is not None:
            if order in self._base_orders:
                raise rejected("availability_order_reused", job_id=job.id.hex(), order=order)
            self._base_orders.add(order)
            self.next_order = max(self.next_order, order + 1)
        self._flush()
        self._last_job_id = job.id
        self._pending = job

    @property
    def last_job_id(self) -> bytes | None:
        """The id of the last base job so far (the next must be above it)."""
        return self._last_job_id

    @property
    def takes_base_jobs(self) -> bool:
        """Whether ``base_jobs`` may come now: in the base, before any checkpoint."""
        return self.in_base and not self._checkpoints_started

    @property
    def takes_base_live(self) -> bool:
        """Whether a columnar base run may hold live jobs as rows (``base_jobs``' ``live``)."""
        return self.install_base_live is not None

    def fresh_orders(self, rows: list[BaseLiveRow]) -> int:
        """How many of ``rows`` (in order) ``snapshot_state`` would take without refusing
        an availability order given out before (the rest go the exact way, which refuses
        the first where it stands)."""
        seen = self._base_orders
        orders = [row.ready_order for row in rows if row.ready_order is not None]
        if len(set(orders)) == len(orders) and seen.isdisjoint(orders):
            return len(rows)
        taken: set[int] = set()
        for k, row in enumerate(rows):
            order = row.ready_order
            if order is not None:
                if order in seen or order in taken:
                    return k
                taken.add(order)
        return len(rows)

    def base_jobs(self, jobs: BaseJobs, live: list[BaseLiveRow] | None = None,
                  befores: list[int] | None = None) -> None:
        """Finished jobs the columnar replay took whole (``tay._native.base_jobs``: each a
        terminal snapshot above ``last_job_id`` with no order, and at most one result it
        takes as ``JobRow.take`` would), as ``snapshot_state`` and ``attachment_row`` would
        have taken them one by one; only while ``takes_base_jobs``. ``live``: the run's
        live jobs (with ``takes_base_live``), ``live[m]`` after ``befores[m]`` of ``jobs``,
        their orders fresh (``fresh_orders``)."""
        if not self.takes_base_jobs:
            raise RuntimeError("base jobs only in the base, before any checkpoint")
        self._flush()
        if live:
            if self.install_base_live is None:
                raise RuntimeError("live base rows only for a consumer that holds them")
            orders = [row.ready_order for row in live if row.ready_order is not None]
            if orders:
                self._base_orders.update(orders)
                self.next_order = max(self.next_order, max(orders) + 1)
            self.install_base_live(jobs, live, befores)
            last = live[-1].id
            self._last_job_id = max(last, jobs.last_id) if len(jobs) else last
            return
        if self.install_rows is not None:
            self.install_rows(jobs)
        elif self.install_row is not None:
            for row in jobs.job_rows():
                self.install_row(row)
        else:
            for row in jobs.job_rows():
                self.install(row.job_state(), None)
        self._last_job_id = jobs.last_id

    def attachment(self, event: ev.Event) -> None:
        self._require_base("attachment")
        pending = self._pending
        if pending is None:
            raise rejected("attachment_without_snapshot", pair=list(event.pair))
        if type(pending) is JobRow:
            pending = pending.job_state()
        self._pending = attach(pending, event)

    def attachment_row(self, row: ResultRow) -> None:
        """A result attachment the fast path kept as its row: onto a ``JobRow`` that takes
        it as it is, else decoded and attached as any other."""
        pending = self._pending
        if not (type(pending) is JobRow and self.in_base and pending.take(row)):
            self.attachment(row.event())

    def checkpoint(self, record: EpochEvent) -> None:
        self._require_base("checkpoint")
        if record.carry.job_scoped:
            raise rejected("job_event_in_base", pair=list(record.event.pair))
        if record.event.get("expected_revision", 0) != 0:
            raise rejected("checkpoint_not_creating", pair=list(record.event.pair))
        entity = record.entity
        if entity in self.entities:
            raise rejected("checkpoint_twice", entity=repr(entity))
        self._flush()
        self._checkpoints_started = True
        self.apply_entity(record.revision, record.event)
        self.entities[entity] = record.revision

    def end_base(self) -> None:
        """The base is complete: install the last job and start the allocator (§3.6)."""
        self._flush()
        self.in_base = False
        self._base_orders = set()

    def _flush(self) -> None:
        pending = self._pending
        if pending is not None:
            if type(pending) is not JobRow:
                self.install(pending, None)
            elif self.install_row is not None:
                self.install_row(pending)
            else:
                self.install(pending.job_state(), None)
            self._pending = None

    def _require_base(self, what: str) -> None:
        if not self.in_base:
            raise RecoveryRefused("unsupported_semantics", "record_profile", record=what,
                                  region="tail")

    # ---- tail -----------------------------------------------------------------------

    def mutation(self, mutation: Mutation) -> JobState:
        """Apply one (8,1) mutation: S = new_revision, the allocator checks its order."""
        if self.in_base:
            self._require_tail("mutation")
        job_id, _, _, revision, _, order, event = mutation
        state = apply(self.lookup(job_id), revision, event)
        if order is not None:
            if order != self.next_order:
                raise rejected("availability_order_mismatch", job_id=job_id.hex(),
                               order=order, expected=self.next_order)
            self.next_order = order + 1
        if state.ready_order != order:
            state = with_ready_order(state, order)
        self.install(state, event)
        return state

    def event(self, record: EpochEvent) -> JobState | None:
        """Apply one (30,2) tail event; returns the job's new state for job-scoped pairs."""
        if self.in_base:
            self._require_tail("epoch_event")
        event, revision, carry = record
        payload = event.payload
        expected = payload.get("expected_revision")
        if expected is not None and revision != expected + 1:
            raise rejected("revision_not_consecutive", pair=list(event.pair),
                           revision=revision, expected_revision=expected)
        if carry.entity is job_entity:  # job-scoped (carry.job_scoped)
            if event.type == _DELETED_TYPE and self.drop_held is not None \
                    and self.drop_held(payload["job_id"], expected):
                return None  # dropped where it was held, as its install would drop it
            previous = self.lookup(payload["job_id"])
            state = apply(previous, revision, event)
            order = None
            if state.state == "available":
                if previous is not None and previous.state == "available":
                    order = previous.ready_order
                else:
                    order = self.next_order
                    self.next_order += 1
            if state.ready_order != order:
                state = with_ready_order(state, order)
            self.install(state, event)
            return state
        entity = record.entity
        current = self.entities.get(entity, 0)
        if revision != current + 1 or (expected is not None and expected != current):
            raise rejected("entity_revision_mismatch", entity=repr(entity), revision=revision,
                           expected_revision=expected, current=current)
        self.apply_entity(revision, event)
        self.entities[entity] = revision
        return None

    def _require_tail(self, what: str) -> None:
        if self.in_base:
            raise RecoveryRefused("unsupported_semantics", "record_profile", record=what,
                                  region="base")

    # ---- what the live writer needs ---------------------------------------------------

    def order_for(self, previous: JobState | None, state: JobState) -> int | None:
        """The order a live change that leaves ``state`` must carry (None: none)."""
        if state.state != "available":
            return None
        if previous is not None and previous.state == "available":
            return previous.ready_order
        return self.next_order

    def entity_revision(self, entity: tuple) -> int:
        return self.entities.get(entity, 0)

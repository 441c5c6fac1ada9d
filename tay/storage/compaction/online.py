"""Online compaction (storage.md §3.8 "Online"): the pieces that run while the engine serves.

The server drives three phases (``tay.server.compaction.compactor``); this module is their
synchronous storage side:

1. **Capture**, on the event loop: the journal is drained and rotated, so the frozen source
   is exactly the segments before the new active one, and the engine's retained state (jobs,
   entity checkpoints, the availability allocator) is taken at that journal position
   (``OnlineSource`` + ``Capture``). The jobs are immutable values (a live job's
   ``JobState``, a held job's row or packed tuple), so the snapshot is a list of references.
2. **Prepare**, in the compaction process (``prepare``; ``tay.storage.compaction.forked``
   runs this module's storage steps there): retention filter, source inventory, space
   admission, candidate base + MANIFEST + empty tail, and an independent replay of the
   candidate compared with the plan job by job as it comes (steps 1-6; ``PlannedTable``:
   no retained job is held twice as objects). The engine keeps writing to the source's
   new active segment meanwhile; the driver keeps a copy of those records.
3. **Switch**, on the loop with admission paused (the server): the records written since
   the capture are re-framed with the tail's sequences (``reframe``) and appended to the
   candidate tail, the epoch is published and CURRENT switched (steps 6-9); the journal
   then appends to the new tail. Afterwards the catch-up, replayed onto the verified base,
   is compared with the live jobs it touched (step 10: ``verify_live_jobs``, their fields
   built from a copy of the engine as the switch left it: ``live_fields``;
   ``verify_totals``), and the predecessor is reclaimed (step 11).

Availability orders: online orders are kept (§3.6), so the base's allocator resumes at
``B`` = highest kept order + 1, while the live allocator stood at ``L >= B`` at the capture
(orders taken by jobs that have left ``available``). Every order given out after the
capture is shifted down by ``L - B`` in the catch-up (the records are otherwise copied
byte for byte) and in the engine at the switch, so the new epoch and the engine agree, and
order comparisons are unchanged (every kept order is below ``B``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from tay.failures import RecoveryRefused
from tay.storage.compaction import publish
from tay.storage.compaction.candidate import Candidate, CandidateWriter, TailAppender
from tay.storage.compaction.leftovers import reclaim_leftovers
from tay.storage.compaction.plan import Checkpoint, base_records, expires
from tay.storage.compaction.space import admit_space, base_estimate, estimate_job_bytes
from tay.storage.compaction.trigger import source_bytes  # noqa: F401 (re-exported)
from tay.storage.compaction.verify import (
    BUILD_CHUNK, PlannedTable, built, job_fields, mismatch, one_at_a_time,
)
from tay.storage.events.transitions import JobState
from tay.storage.formats.segment import segment_file_name
from tay.storage.fsio import RealIO
from tay.storage.journal.setup import new_store_id
from tay.storage.recovery.limits import RecoveryOptions
from tay.storage.recovery.store_v2 import _Dispatch, file_sha256, read_epoch_dir, replay_v2
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.manifest import Retention
from tay.storage.v2.records import MUTATION_PAIR
from tay.storage.v2.reducer import EpochReducer

JournalRecord = tuple[int, int, int, bytes]  # (sequence, type, schema, payload)

# An (8,1) payload: a 41-byte prefix, then the body map (tag, u32 count) whose first key in
# canonical (UTF-8 byte) order is "availability_order" whenever the kind has one; a set
# order is a tagged u64 at a fixed offset, so it is shifted in place.
_BODY = 41 + 5
_ORDER_KEY = b"\x06\x00\x00\x00\x12availability_order"
_ORDER_AT = _BODY + len(_ORDER_KEY)


@dataclass(frozen=True)
class OnlineSource:
    """Where the capture froze the source epoch."""

    root: str
    store_id: bytes
    epoch_id: bytes
    current: bytes  # CURRENT's bytes at the capture (re-checked before the switch)
    segments_dir: str
    active_id: int  # the new active segment: the frozen source is 1..active_id-1
    frontier: int  # the last sequence of the frozen source
    rotation_target: int


@dataclass
class Capture:
    """The engine's retained state at the source frontier."""

    source: OnlineSource
    captured_at: int
    retention: Retention  # the one this compaction applies (already in durable form)
    jobs: list[Any]  # immutable values (the engine's ``captured_jobs``: CapturedJobs.jobs)
    checkpoints: list[Checkpoint]
    next_order: int  # the live allocator ``L``
    state_of: Callable[[Any], JobState]  # builds one of ``jobs`` (in the compaction process)
    id_of: Callable[[Any], bytes]  # one of ``jobs``' id, without building it
    started: float = field(default_factory=time.monotonic)
    # builds several of ``jobs`` at once, in order (None: ``state_of`` of each)
    states_of: Callable[[Sequence[Any]], list[JobState]] | None = None
    # what the plan reads of one of ``jobs`` without building it: a value with its id,
    # state, revision and terminal_at, and its ``estimate_job_bytes``; None: build it
    plan_of: Callable[[Any], tuple[Any, int] | None] | None = None


@dataclass
class Prepared:
    """A written and verified candidate, waiting for the switch."""

    capture: Capture
    writer: CandidateWriter
    candidate: Candidate
    epoch_id: bytes
    expired: dict[bytes, int]  # job id -> its revision at the capture
    retained_jobs: int
    base_bytes: int
    base_next_order: int  # ``B``
    reducer: EpochReducer  # the replayed base, where the catch-up check continues
    table: PlannedTable  # the replayed epoch, where the catch-up check looks jobs up
    timings_ms: dict[str, int]
    appender: TailAppender | None = None  # the tail, open for the catch-up
    catch_up_records: int = 0  # appended so far
    touched: set[bytes] = field(default_factory=set)  # jobs the catch-up changed

    @property
    def order_shift(self) -> int:
        return self.capture.next_order - self.base_next_order


def prepare(capture: Capture, *, io: RealIO | None = None,
            options: RecoveryOptions | None = None,
            max_candidate_bytes: int | None = None) -> Prepared:
    """Steps 1-6 in the compaction process: nothing here touches the engine or the journal."""
    io = io or RealIO()
    options = options or RecoveryOptions()
    source = capture.source
    started = time.monotonic()
    timings: dict[str, int] = {}

    def mark(step: str) -> None:
        timings[step] = round((time.monotonic() - started) * 1000)

    # The plan streams: the kept jobs are the captured values (ascending id), planned from
    # a held row's own fields (``plan_of``) or else built, then built into their JobStates
    # when the base is written and again when the replay is compared with it, a chunk of
    # BUILD_CHUNK at a time (the finished tail jobs in one decode: 28 against 52 µs a job),
    # and dropped in between, so the retained jobs are not held a second time as objects
    # (a full collection would walk them all, with the loop stopped).
    state_of, id_of = capture.state_of, capture.id_of
    states_of = capture.states_of or one_at_a_time(state_of)  # BUILD_CHUNK at a time
    kept: list[Any] = []
    expired: dict[bytes, int] = {}
    job_bytes = 0
    plan_of = capture.plan_of  # None: every job is built to be planned
    for captured in sorted(capture.jobs, key=id_of):
        planned = plan_of(captured) if plan_of is not None else None  # a held row: its fields
        job, estimate = planned if planned is not None else (state_of(captured), None)
        if expires(job, capture.retention, capture.captured_at):
            expired[job.id] = job.revision
        else:
            kept.append(captured)
            job_bytes += estimate if estimate is not None else estimate_job_bytes(job)
    inventory = tuple(
        (segment_id, file_sha256(io, path, io.lstat(path).st_size))
        for segment_id, path in ((i, os.path.join(source.segments_dir, segment_file_name(i)))
                                 for i in range(1, source.active_id)))
    mark("planned")
    admit_space(io, source.root, base_estimate(job_bytes, capture.checkpoints),
                len(inventory), max_candidate_bytes)
    reclaim_leftovers(io, source.root)  # leaked candidates, unselected epochs, staging
    writer = CandidateWriter(io, source.root, source.store_id, source.rotation_target)
    writer.create_directories()
    base = writer.write_base(base_records(built(kept, states_of), capture.checkpoints))
    epoch_id = new_store_id()
    manifest, manifest_bytes = writer.write_manifest(
        epoch_id=epoch_id, captured_at=capture.captured_at, retention=capture.retention,
        source_epoch_id=source.epoch_id, source_frontier=source.frontier,
        source_segments=inventory)
    candidate = writer.create_tail(manifest, manifest_bytes)
    mark("candidate_written")
    table = PlannedTable(kept, state_of, id_of, options.event_limits, states_of)
    reducer = _replay(io, candidate.path, source.store_id, options, table)
    table.end_base()
    if len(table.entities) != len(capture.checkpoints):
        raise mismatch("entity_count", expected=len(capture.checkpoints),
                       found=len(table.entities))
    mark("candidate_verified")
    return Prepared(capture, writer, candidate, epoch_id, expired, len(kept),
                    sum(segment.bytes for segment in base), reducer.next_order, reducer, table,
                    timings, writer.tail_appender(candidate))


def copy_ahead(prepared: Prepared, chunk: Sequence[JournalRecord]) -> set[bytes]:
    """A catch-up round before the switch, in the compaction process: records submitted
    since the capture (the driver hands each chunk over and starts a new one) go into the
    tail, are fsynced and replayed onto the verified base, so the switch only appends what
    arrived during the last round. Records not yet durable in the source may be copied:
    nothing is published before the switch has drained the writer (a writer that stops
    instead ends this compaction). Returns the ids of the jobs the chunk touches."""
    records = reframe(chunk, prepared.order_shift)
    prepared.appender.append(records)
    prepared.appender.sync()
    return catch_up(prepared, chunk, records)


def catch_up(prepared: Prepared, chunk: Sequence[JournalRecord],
             records: Sequence[tuple[int, int, bytes]]) -> set[bytes]:
    """Replay re-framed catch-up records onto the verified base (the reducer refuses what
    the new epoch would refuse) and note the jobs they touch (returned too)."""
    dispatch = _Dispatch(prepared.reducer, prepared.table.limits)
    for rtype, schema, payload in records:
        dispatch.tail((rtype, schema), memoryview(payload))
    touched = touched_jobs(chunk)
    prepared.touched |= touched
    prepared.catch_up_records += len(records)
    return touched


def _replay(io: RealIO, path: str, store_id: bytes, options: RecoveryOptions,
            table: PlannedTable) -> EpochReducer:
    view = read_epoch_dir(io, path, store_id, options)
    try:
        _, reducer = replay_v2(view, table, table.limits)
        assert reducer is not None
        return reducer
    finally:
        view.close()


def shift_order(payload: bytes, shift: int) -> bytes:
    """An (8,1) payload whose availability order (if set) is ``shift`` lower."""
    if payload[_BODY:_ORDER_AT] != _ORDER_KEY or payload[_ORDER_AT] != 4:
        return payload  # no order (nil, or a kind without one)
    order = int.from_bytes(payload[_ORDER_AT + 1:_ORDER_AT + 9], "big")
    if order <= shift:
        raise RecoveryRefused("consumer_rejected", "verification_mismatch",
                              stage="catch_up", what="availability_order", order=order,
                              shift=shift)
    return (payload[:_ORDER_AT + 1] + (order - shift).to_bytes(8, "big")
            + payload[_ORDER_AT + 9:])


def reframe(records: Sequence[JournalRecord], shift: int) -> list[tuple[int, int, bytes]]:
    """The catch-up: ``(type, schema, payload)`` of the records written since the capture,
    orders shifted into the new epoch's allocator; the tail gives the sequences."""
    if not shift:
        return [(rtype, schema, payload) for _, rtype, schema, payload in records]
    out = []
    for _, rtype, schema, payload in records:
        if (rtype, schema) == MUTATION_PAIR:
            payload = shift_order(bytes(payload), shift)
        out.append((rtype, schema, payload))
    return out


def without_deleted_expiries(records: Sequence[JournalRecord], expired: dict[bytes, int]
                             ) -> Sequence[JournalRecord]:
    """The catch-up without the deletions of jobs the plan expires (an operator's bulk
    delete of old jobs during the compaction). The new base does not hold those jobs, so
    the record would name an unknown job there; the state it gives, the job gone, is the
    base's own. Without this, such a deletion failed the compaction.

    A deletion is dropped only at the revision the plan expires (a job changed since the
    capture still fails the compaction, ``stale_expiries``), and its id leaves ``expired``
    at once: a new job under the id that the catch-up inserts, and maybe deletes, is the
    catch-up's own, and the switch does not expire it. Call it on every catch-up record,
    in order; returns the records to copy."""
    from tay.storage.events.registry import JOB_DELETED
    from tay.storage.v2.epoch_records import EPOCH_EVENT_PAIR, decode_epoch_event

    inner = bytes(JOB_DELETED)
    dropped: set[int] = set()
    for at, (_, rtype, schema, payload) in enumerate(records):
        if (rtype, schema) == EPOCH_EVENT_PAIR and payload[:2] == inner:
            event = decode_epoch_event(payload).event
            job_id = event["job_id"]
            if expired.get(job_id, -1) == event["expected_revision"]:
                del expired[job_id]
                dropped.add(at)
    if not dropped:
        return records
    return [record for at, record in enumerate(records) if at not in dropped]


def publish_switch(prepared: Prepared, rest: Sequence[tuple[int, int, bytes]],
                   io: RealIO | None = None) -> tuple[Any, bytes]:
    """Steps 6 (catch-up), 7 and the CURRENT re-check of 8, with admission paused: the rest
    of the catch-up is appended to the candidate tail and the epoch is published. Any
    failure here leaves the old CURRENT authoritative. Returns (the tail the journal opens,
    the CURRENT bytes ``switch_current`` is to publish)."""
    import hashlib

    from tay.storage.v2.markers import Current, encode_current

    io = io or RealIO()
    source = prepared.capture.source
    prepared.appender.append(rest)
    tail = prepared.appender.finish()
    publish.publish_epoch(io, source.root, prepared.candidate.path, prepared.epoch_id)
    if publish.read_current(io, source.root) != source.current:
        raise RecoveryRefused("changed_view", "authority_changed", path=source.root,
                              stage="publication")
    current = encode_current(Current(source.store_id, prepared.epoch_id,
                                     hashlib.sha256(prepared.candidate.manifest_bytes).digest()))
    return tail, current


def epoch_segments(root: str, epoch_id: bytes) -> str:
    return os.path.join(root, v2_layout.EPOCHS_DIR, v2_layout.epoch_dir_name(epoch_id),
                        v2_layout.SEGMENTS_DIR)


def verify_live_jobs(prepared: Prepared,
                     live: Iterable[tuple[bytes, tuple | None]]) -> None:
    """Step 10 for the online path, once the whole catch-up is replayed onto the verified
    base (the earlier rounds as they were copied, the switch's last records by
    ``catch_up``): the replay must give the jobs the engine holds. ``live``: each touched
    job's id and durable fields (``job_fields``) as the engine held it at the switch (None:
    not retained), as ``live_fields`` gives them; a chunk at a time, kept nowhere."""
    table = prepared.table
    for job_id, fields in live:
        found = table.job(job_id)
        if (found is None) != (fields is None) or (
                found is not None and job_fields(found) != fields):
            raise mismatch("job", job_id=job_id.hex(), step="catch_up")


def verify_totals(prepared: Prepared, live_count: int,
                  live_entities: dict[tuple, int]) -> None:
    """The rest of step 10: the replay's job count and entity revisions are the engine's."""
    table = prepared.table
    if table.count() != live_count:
        raise mismatch("job_count", expected=live_count, found=table.count(),
                       step="catch_up")
    if prepared.reducer.entities != live_entities:
        raise mismatch("entities", step="catch_up")


def live_fields(live: Mapping[bytes, Any], states_of: Callable[[Sequence[Any]],
                                                                list[JobState]],
                chunk: int = BUILD_CHUNK) -> Iterator[list[tuple[bytes, tuple | None]]]:
    """What ``verify_live_jobs`` compares, built from the engine's values at the switch
    (``live``: each touched id's captured value, None if not retained): ``(job id, its
    job_fields or None)``, ``chunk`` jobs at a time."""
    items = list(live.items())
    for start in range(0, len(items), chunk):
        part = items[start:start + chunk]
        retained = [value for _, value in part if value is not None]
        states = iter(states_of(retained)) if retained else iter(())
        yield [(job_id, None if value is None else job_fields(next(states)))
               for job_id, value in part]


def touched_jobs(records: Sequence[JournalRecord]) -> set[bytes]:
    """Ids of the jobs the catch-up changes ((8,1) prefixes, (30,2) job events)."""
    from tay.storage.v2.epoch_records import EPOCH_EVENT_PAIR, decode_epoch_event

    out: set[bytes] = set()
    for _, rtype, schema, payload in records:
        if (rtype, schema) == MUTATION_PAIR:
            out.add(bytes(payload[:16]))
        elif (rtype, schema) == EPOCH_EVENT_PAIR:
            record = decode_epoch_event(payload)
            if record.carry.job_scoped:
                out.add(record.event["job_id"])
    return out

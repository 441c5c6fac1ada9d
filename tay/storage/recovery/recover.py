"""v1 recovery (storage.md §7): validate, lock, preflight, replay, revalidate, activate.

``recover(data_dir, ...)`` never changes a byte on refusal: every refusal is a
``RecoveryRefused`` with ``kind`` from the fixed set, ``reason`` (the nested physical or
semantic class), ``stage`` and, when known, ``path``, ``segment_id``, ``offset`` and
``sequence``. There is no repair, truncation, skip or force.

Pass 1 (preflight) classifies the directory, reads STORE, scans every segment in ID order
(one ``mmap`` and one native scan per file), checks the topology and re-lists. Pass 2
(replay) feeds every record, in order, to a consumer ``consumer(sequence, type, schema,
payload)`` where ``payload`` is a zero-copy ``memoryview`` into the mapping. Revalidation
repeats pass 1 and requires the same view. Activation returns an open ``Journal`` at the
tail (or nothing, for read-only use such as ``tay storage inspect``).

Memory: both scans walk a segment in windows (``segment.SCAN_WINDOW``) and hand each
window's mapped pages back to the kernel (``MADV_DONTNEED``; they stay in the page cache)
once walked, and replay does the same per batch, so only a window or a batch of the
segment is resident at any time. The scan also accumulates the segment CRC as it goes:
the footer check and the writer's running CRC need no further pass over the file.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Protocol

from tay._frozen import Record
from tay.failures import RecoveryRefused, StorageFailure
from tay.storage import events as event_codec
from tay.storage import layout
from tay.storage.formats import segment, segment_ledger, store_marker
from tay.storage.fsio import RealIO
from tay.storage.journal.writer import (
    DEFAULT_ROTATION_TARGET,
    Journal,
    Tail,
    check_durability,
    check_rotation_target,
)
from tay.storage.recovery import adoption
from tay.storage.recovery.outcome import Consumer, Recovered
from tay.storage.recovery.physical import (
    HeldSegments, ScanPass, SegmentView, check_ledger, drop_pages, naming_repair,
    scan_one,
)
from tay.storage.recovery.limits import (
    Clock, RecoveryOptions, RecoveryTimer, monotonic_ms,
)
from tay.storage.events.transitions import JobState, JobTable
from tay.storage.formats.value import DecodeLimits, locate

class FrozenView(HeldSegments, Record):
    """The result of pass 1: what replay reads and revalidation must find again."""

    __slots__ = ("inventory", "store_id", "segments", "next_sequence", "record_count",
                 "exhausted", "ledger")
    inventory: layout.Inventory
    store_id: bytes
    segments: list[SegmentView]
    next_sequence: int
    record_count: int
    exhausted: bool
    ledger: segment_ledger.Ledger | None  # None: the store has no SEGMENT-LEDGER

    def __init__(self, inventory: layout.Inventory, store_id: bytes,
                 segments: list[SegmentView], next_sequence: int, record_count: int,
                 exhausted: bool, ledger: segment_ledger.Ledger | None = None) -> None:
        self.inventory = inventory
        self.store_id = store_id
        self.segments = segments
        self.next_sequence = next_sequence
        self.record_count = record_count
        self.exhausted = exhausted
        self.ledger = ledger

    def key(self) -> tuple:
        return (self.inventory.fingerprint, self.store_id, self.segments_key(),
                self.next_sequence)


def _read_store(io: RealIO, inventory: layout.Inventory, stage: str) -> bytes:
    path = os.path.join(inventory.root, layout.STORE_NAME)
    if not inventory.has_store:
        others = inventory.unrelated or inventory.has_ledger  # the ledger comes after STORE
        if not inventory.segment_ids and not others:
            raise RecoveryRefused("initialization_required", "uninitialized", path=inventory.root,
                                  stage=stage)
        genesis_size = segment.HEADER_SIZE  # one empty active segment 1 (header only)
        if inventory.segment_ids == [1] and not others and \
                inventory.total_segment_bytes == genesis_size:
            raise RecoveryRefused("initialization_required", "genesis", path=path, stage=stage)
        raise RecoveryRefused("discovery", "missing_store_marker", path=path, stage=stage)
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as handle:
        data = handle.read(64)
    try:
        return store_marker.decode_store_marker(data, path)
    except StorageFailure as failure:
        raise locate(failure, path=path, stage=stage) from None


def preflight(io: RealIO, data_dir: str, options: RecoveryOptions,
              keep_mappings: bool = True, timer: RecoveryTimer | None = None,
              stage: str = "preflight", highest_length: int | None = None,
              legacy: str | None = None) -> FrozenView:
    """Pass 1: a complete physical validation of the store, read-only.

    ``keep_mappings=False`` (revalidation) closes each segment's mapping after its scan.
    ``timer`` (a fresh one by default) is checked after every I/O step.
    ``highest_length``: judge the highest segment as if it ended there (repair's check of
    the store it would leave; the file is not touched). ``legacy`` reads an interrupted
    first adoption's v1 segments where the adoption moved them.
    """
    run = ScanPass(options, timer or RecoveryTimer(options), stage, keep_mappings)
    inventory = layout.classify(io, data_dir, options.max_directory_entries, legacy=legacy)
    run.timer.check(stage, path=inventory.root)
    if options.max_total_segment_bytes is not None and \
            inventory.total_segment_bytes > options.max_total_segment_bytes:
        raise RecoveryRefused("resource_limit", "max_total_segment_bytes", path=inventory.root,
                              stage=stage, total=inventory.total_segment_bytes)
    store_id = _read_store(io, inventory, stage)
    run.timer.check(stage, path=os.path.join(inventory.root, layout.STORE_NAME))
    if not inventory.segment_ids:
        raise RecoveryRefused("discovery", "missing_history", path=inventory.segments_path,
                              stage=stage)
    views: list[SegmentView] = []
    records = 0
    try:
        highest_id = inventory.segment_ids[-1]
        for segment_id in inventory.segment_ids:
            highest = segment_id == highest_id
            view = scan_one(io, inventory.segment_path(segment_id), segment_id, store_id,
                             highest, run, highest_length if highest else None)
            views.append(view)
            records += view.scan.count
            if options.max_replay_records is not None and records > options.max_replay_records:
                raise RecoveryRefused("resource_limit", "max_replay_records", path=view.path,
                                      segment_id=segment_id, stage=stage)
        try:
            topology = segment.topology_check([v.scan for v in views], [v.path for v in views])
        except StorageFailure as failure:
            raise locate(failure, stage=stage) from None
        ledger = check_ledger(io, inventory.root, store_id, segment_ledger.V1_EPOCH, views,
                              inventory.segment_path, stage) if inventory.has_ledger else None
        again = layout.classify(io, data_dir, options.max_directory_entries, legacy=legacy)
        if again.fingerprint != inventory.fingerprint:
            raise RecoveryRefused("changed_view", "directory_changed_during_preflight",
                                  path=inventory.root, stage=stage)
        run.timer.check(stage, path=inventory.root)
    except BaseException:
        for view in views:
            if view.mapping is not None:
                view.mapping.close()
        raise
    return FrozenView(inventory, store_id, views, topology.next_sequence, records,
                      topology.exhausted, ledger)


def replay(view: FrozenView, consumer: Consumer, timer: RecoveryTimer | None = None) -> int:
    """Pass 2: feed every record, in global sequence order, to ``consumer``.

    A consumer with a ``consume_event(sequence, event)`` method (and ``limits``) receives
    decoded events instead: each segment is then checked by one native batch call
    (``events.decode_events``), and records the fast path cannot vouch for are decoded
    exactly, in order, so refusals are the same as on the per-record path.
    ``timer`` is checked after every batch of ``_EVENT_BATCH`` records.
    """
    expected = 1
    consume_event = getattr(consumer, "consume_event", None)
    for segment_view in view.segments:
        buffer = memoryview(segment_view.mapping) if segment_view.mapping is not None else memoryview(b"")
        records = segment_view.scan.records
        try:
            for start in range(0, len(records), _EVENT_BATCH):
                chunk = list(records.batch(start, start + _EVENT_BATCH))
                if consume_event is not None:
                    events = event_codec.decode_events(
                        buffer, [(offset + 24, length, rtype, schema)
                                 for offset, rtype, schema, _, length in chunk], consumer.limits)
                for offset, rtype, schema, sequence, length in chunk:
                    if sequence != expected:
                        raise RecoveryRefused("continuity", "global_sequence", path=segment_view.path,
                                              segment_id=segment_view.segment_id, offset=offset,
                                              sequence=sequence, stage="replay", expected=expected)
                    try:
                        if consume_event is not None:
                            consume_event(sequence, next(events))
                        else:
                            _consume_record(buffer, offset, length, consumer, sequence, rtype, schema)
                    except StorageFailure as failure:
                        raise locate(failure, path=segment_view.path,
                                     segment_id=segment_view.segment_id, sequence=sequence,
                                     stage="replay", base_offset=0) from None
                    expected += 1
                if segment_view.mapping is not None:
                    last_offset, _, _, _, last_length = chunk[-1]
                    drop_pages(segment_view.mapping, 0, last_offset + 24 + last_length)
                if timer is not None:
                    timer.check("replay", path=segment_view.path, sequence=expected - 1,
                                segment_id=segment_view.segment_id, offset=chunk[-1][0])
        finally:
            buffer.release()
    return expected - 1


def _consume_record(buffer: memoryview, offset: int, length: int, consumer: Consumer,
                    sequence: int, rtype: int, schema: int) -> None:
    payload = buffer[offset + 24: offset + 24 + length]
    try:
        consumer(sequence, rtype, schema, payload)
    finally:
        payload.release()


_EVENT_BATCH = 4096  # records per native call: bounds the row scratch, not the replay


class EventSink(Protocol):
    def __call__(self, sequence: int, event: event_codec.Event) -> None: ...


class TableConsumer(Record):
    """The default replay consumer: decode each event and apply it to a ``JobTable``."""

    __slots__ = ("limits", "table", "other_events")
    limits: DecodeLimits
    table: JobTable
    other_events: Counter

    def __init__(self, limits: DecodeLimits | None = None, table: JobTable | None = None,
                 other_events: Counter | None = None) -> None:
        # None: a fresh one for each consumer (the dataclass's default factories)
        self.limits = DecodeLimits() if limits is None else limits
        self.table = JobTable() if table is None else table
        self.other_events = Counter() if other_events is None else other_events

    def __call__(self, sequence: int, rtype: int, schema: int, payload: memoryview) -> None:
        self.consume_event(sequence, event_codec.decode_event(rtype, schema, payload, self.limits))

    def consume_event(self, sequence: int, event: event_codec.Event) -> None:
        """Apply one decoded event (what ``replay`` calls on its batch path)."""
        if event.is_job_event:
            self.table.apply(sequence, event)
        else:
            self.other_events[event.name] += 1

    # the Store-v2 reducer's side (tay.storage.recovery.store_v2)
    def epoch_job(self, job_id: bytes) -> JobState | None:
        return self.table.get(job_id)

    def epoch_install(self, job: JobState, event: event_codec.Event | None) -> None:
        self.table.install(job, event)

    def epoch_entity(self, revision: int, event: event_codec.Event) -> None:
        self.other_events[event.name] += 1

    # what a compaction reads from the replayed state (tay.storage.compaction)
    def retained_jobs(self) -> list[JobState]:
        return list(self.table)

    def checkpoints(self, captured_at: int) -> list:
        """A table keeps jobs only: it cannot carry other state through a compaction."""
        if self.other_events:
            raise RecoveryRefused("argument", "state_not_carried", stage="compaction",
                                  events=dict(self.other_events))
        return []


def recover(
    data_dir: str,
    *,
    consumer: Consumer | None = None,
    durability: str = "sync",
    validated_filesystem: bool = False,
    rotation_target: int = DEFAULT_ROTATION_TARGET,
    options: RecoveryOptions | None = None,
    io: RealIO | None = None,
    activate: bool = True,
    allow_small_rotation_target_for_tests: bool = False,
    clock: Clock = monotonic_ms,
    lock: layout.StoreLock | None = None,
) -> Recovered:
    """Run the §7 pipeline (§3.7 for a Store-v2 root). With ``activate=False`` the store is
    only read (lock released).

    ``clock`` (monotonic milliseconds) times the deadlines of ``options``. ``lock``: the
    owner lock this process already holds (a compaction verifying what it published): it
    is used and never released here, and only read-only recovery is allowed with it.
    """
    io = io or RealIO()
    options = options or RecoveryOptions()
    root = os.path.abspath(data_dir)
    options.validate()
    timer = RecoveryTimer(options, clock)
    check_rotation_target(rotation_target,
                          allow_below_minimum_for_tests=allow_small_rotation_target_for_tests)
    if activate:
        check_durability(io, root, durability, validated_filesystem)
    if consumer is None:
        consumer = TableConsumer(limits=options.event_limits)
    held = lock is not None
    if held and activate:
        raise ValueError("a held lock is only for read-only recovery")
    if lock is None:
        lock = layout.acquire_lock(io, root, create=False, fsync_ancestors=False)
    view: FrozenView | None = None
    try:
        timer.check("ownership", path=root)
        legacy = None
        shape = adoption.root_shape(io, root)
        if shape == "adoption":
            if activate:  # roll the interrupted first adoption back, then read v1 (§3.7)
                adoption.roll_back(io, root)
            else:  # read-only: read the v1 store the rollback would give back
                legacy = adoption.legacy_dir(io, root)
        elif shape == "v2":
            from tay.storage.recovery.epoch_recover import recover_epoch

            return recover_epoch(io, root, lock, consumer, options, timer, durability,
                                 rotation_target, activate)
        try:
            view = preflight(io, root, options, timer=timer, legacy=legacy)
        except RecoveryRefused as refusal:
            raise naming_repair(refusal, root) from None
        replayed = replay(view, consumer, timer)
        if activate:
            timer.open_window()  # the candidate is held from here until activation
        tail = view.tail() if activate and not view.exhausted else None
        view.close()  # revalidation maps the files again: never hold both passes' pages
        again = preflight(io, root, options, keep_mappings=False, timer=timer,
                          stage="revalidation", legacy=legacy)
        if again.key() != view.key():
            raise RecoveryRefused("changed_view", "store_changed_during_recovery", path=root,
                                  stage="revalidation")
        if not activate:
            return Recovered(view, replayed, None, consumer)
        if view.exhausted:
            raise RecoveryRefused("resource_limit", "store_exhausted", path=root, stage="activation")
        assert tail is not None
        journal = _activate(io, root, lock, tail, durability, rotation_target, timer)
        return Recovered(view, replayed, journal, consumer)
    except BaseException:
        if not held:
            lock.release()
        raise
    finally:
        if view is not None:
            view.close()
        if not activate and not held:
            lock.release()


def _activate(io: RealIO, root: str, lock: layout.StoreLock, tail: Tail,
              durability: str, rotation_target: int, timer: RecoveryTimer) -> Journal:
    timer.start_activation()
    try:
        for directory in layout.walk_no_follow(root):
            io.fsync_dir(directory)
            timer.check("activation", path=directory)
        io.fsync(lock.fd)
        timer.check("activation", path=lock.path)
    except OSError as error:
        raise RecoveryRefused("uncertain_activation", "barrier_failed", path=error.filename or root,
                              stage="activation", mutation="activation_uncertain",
                              errno=error.errno) from None
    try:
        return Journal.open(io, root, lock, tail, durability=durability,
                            rotation_target=rotation_target)
    except StorageFailure as failure:
        raise RecoveryRefused("uncertain_activation", failure.reason, path=failure.path or root,
                              stage="activation", mutation="activation_uncertain") from None

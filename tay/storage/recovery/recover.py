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

import mmap
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

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
from tay.storage.recovery.limits import (
    Clock, RecoveryOptions, RecoveryTimer, monotonic_ms,
)
from tay.storage.events.transitions import JobState, JobTable
from tay.storage.formats.value import DecodeLimits, locate

Consumer = Callable[[int, int, int, memoryview], None]

# Incomplete final objects of the highest segment that ``tay storage repair`` may remove: a
# torn record (or 1-3 bytes of a magic) or a torn footer. Never acknowledged by construction:
# the writer acknowledges a batch only after all of it is written and synced.
TORN_TAIL_REASONS = frozenset({"incomplete_record", "ambiguous_short_tail", "incomplete_footer"})


def is_torn_tail(failure: StorageFailure) -> bool:
    """A refusal ``tay storage repair`` is built for (it still checks the rest first)."""
    return failure.kind == "incomplete_tail" and failure.reason in TORN_TAIL_REASONS


def repair_remedy(root: str) -> str:
    return (f"the incomplete final record was never acknowledged: `tay storage repair "
            f"--data-dir {root}` removes it (keeping its bytes in a side file)")


def naming_repair(refusal: RecoveryRefused, root: str) -> RecoveryRefused:
    """A pass-1 refusal, with ``remedy`` naming ``tay storage repair`` if it is a torn tail."""
    if not is_torn_tail(refusal):
        return refusal
    return RecoveryRefused(refusal.kind, refusal.reason, path=refusal.path,
                           offset=refusal.offset, sequence=refusal.sequence,
                           segment_id=refusal.segment_id, stage=refusal.stage,
                           **{**refusal.extra, "remedy": repair_remedy(root)})


@dataclass
class SegmentView:
    """One scanned segment: its identity, state and record descriptors."""

    segment_id: int
    path: str
    inode: int
    size: int
    scan: segment.SegmentScan
    mapping: mmap.mmap | None


class HeldSegments:
    """What a pass-1 view of any store shape holds: scanned segments (with their mappings),
    the store id and the next sequence. Subclasses are dataclasses with those fields."""

    segments: list[SegmentView]
    store_id: bytes
    next_sequence: int

    def segments_key(self) -> tuple:
        return tuple((s.segment_id, s.inode, s.size, s.scan.state, s.scan.count)
                     for s in self.segments)

    def close(self) -> None:
        for view in self.segments:
            if view.mapping is not None:
                view.mapping.close()
                view.mapping = None

    def tail(self) -> Tail:
        last = self.segments[-1]
        # the running segment CRC the writer continues: every byte of the active file,
        # taken in by the windowed scan (no second pass over the file)
        crc = last.scan.segment_crc
        assert crc is not None
        return Tail(store_id=self.store_id, segment_id=last.segment_id,
                    first_sequence=last.scan.first_sequence,
                    size=last.size, record_count=last.scan.count,
                    segment_crc=crc,
                    sealed=last.scan.state == "sealed", next_sequence=self.next_sequence)


@dataclass
class FrozenView(HeldSegments):
    """The result of pass 1: what replay reads and revalidation must find again."""

    inventory: layout.Inventory
    store_id: bytes
    segments: list[SegmentView]
    next_sequence: int
    record_count: int
    exhausted: bool
    ledger: segment_ledger.Ledger | None = None  # None: the store has no SEGMENT-LEDGER

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


@dataclass
class _Pass:
    """What one physical pass needs besides the store: limits, clock, stage, mappings."""

    options: RecoveryOptions
    timer: RecoveryTimer
    stage: str  # "preflight" or "revalidation"
    keep_mappings: bool


def _scan_one(io: RealIO, path: str, segment_id: int, store_id: bytes,
              highest: bool, run: _Pass, length: int | None = None) -> SegmentView:
    """Map and scan one segment; ``length`` scans only its first bytes (``tay storage
    repair`` judging the store as it would be without a torn tail; nothing is changed)."""
    fd = io.open(path, os.O_RDONLY)
    try:
        info = io.fstat(fd)
        mapping = mmap.mmap(fd, info.st_size, prot=mmap.PROT_READ) if info.st_size else None
    finally:
        io.close(fd)
    size = info.st_size if length is None else min(length, info.st_size)
    buffer: Any = mapping if mapping is not None else b""
    if length is not None and mapping is not None:
        buffer = memoryview(mapping)[:size]
    try:
        run.timer.check(run.stage, path=path, segment_id=segment_id, offset=0)
        scan = segment.scan_segment(
            buffer, segment_id=segment_id, store_id=store_id,
            highest=highest, budget=run.options.max_decode_payload_bytes, path=path,
            release=_WindowDone(mapping, run, path, segment_id))
    except StorageFailure as failure:
        _close_mapping(mapping, buffer)
        raise locate(failure, path=path, segment_id=segment_id, stage=run.stage) from None
    if isinstance(buffer, memoryview):
        buffer.release()
    if mapping is not None:
        _drop_pages(mapping, 0, info.st_size)  # the footer's tail page; replay faults pages back
        if not run.keep_mappings:
            mapping.close()
            mapping = None
    return SegmentView(segment_id, path, info.st_ino, size, scan, mapping)


def _close_mapping(mapping: mmap.mmap | None, buffer: Any) -> None:
    if isinstance(buffer, memoryview):
        buffer.release()
    if mapping is not None:
        try:
            mapping.close()
        except BufferError:  # a cut view's slice still held by the refusal: the GC closes it
            pass


_PAGE = mmap.PAGESIZE


def _drop_pages(mapping: mmap.mmap, start: int, end: int) -> None:
    """Release the whole pages of ``[start, end)`` from this process's resident set.

    The mapping is shared and read-only, so the data stays valid: a later access faults
    the same bytes back in from the page cache.
    """
    first = -(-start // _PAGE) * _PAGE
    last = end // _PAGE * _PAGE if end < len(mapping) else len(mapping)
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)


class _WindowDone:
    """``release`` for a windowed scan: drops the whole pages of a mapping once walked,
    then checks the time limits (a scan window is one I/O step)."""

    __slots__ = ("mapping", "dropped", "run", "path", "segment_id")

    def __init__(self, mapping: mmap.mmap | None, run: _Pass, path: str,
                 segment_id: int) -> None:
        self.mapping = mapping
        self.dropped = 0  # every page below this offset is already handed back
        self.run, self.path, self.segment_id = run, path, segment_id

    def __call__(self, start: int, end: int) -> None:
        last = end // _PAGE * _PAGE
        if self.mapping is not None and last > self.dropped:
            self.mapping.madvise(mmap.MADV_DONTNEED, self.dropped, last - self.dropped)
            self.dropped = last
        self.run.timer.check(self.run.stage, path=self.path, segment_id=self.segment_id,
                             offset=end)


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
    run = _Pass(options, timer or RecoveryTimer(options), stage, keep_mappings)
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
            view = _scan_one(io, inventory.segment_path(segment_id), segment_id, store_id,
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


MAX_LEDGER_BYTES = 64 << 20  # a million segments' entries


def check_ledger(io: RealIO, root: str, store_id: bytes, epoch_id: bytes,
                 views: list[SegmentView], segment_path: Callable[[int], str],
                 stage: str) -> segment_ledger.Ledger:
    """Refuse a store missing (or holding a replaced) segment its ``SEGMENT-LEDGER``
    recorded for the segments directory ``epoch_id`` (all zero: the v1 ``segments/``)."""
    path = os.path.join(root, layout.LEDGER_NAME)
    fd = io.open(path, os.O_RDONLY)
    try:
        size = io.fstat(fd).st_size
        if size > MAX_LEDGER_BYTES:
            raise RecoveryRefused("resource_limit", "ledger_too_large", path=path, stage=stage,
                                  size=size, limit=MAX_LEDGER_BYTES)
        data = io.read_at(fd, size, 0) if size else b""
    finally:
        io.close(fd)
    try:
        ledger = segment_ledger.decode_ledger(data, path)
        segment_ledger.check_segments(
            ledger, store_id, epoch_id,
            {view.segment_id: view.scan.first_sequence for view in views},
            ledger_path=path, segment_path=segment_path)
    except StorageFailure as failure:
        raise locate(failure, stage=stage) from None
    return ledger


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
                    _drop_pages(segment_view.mapping, 0, last_offset + 24 + last_length)
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


@dataclass
class TableConsumer:
    """The default replay consumer: decode each event and apply it to a ``JobTable``."""

    limits: DecodeLimits = field(default_factory=DecodeLimits)
    table: JobTable = field(default_factory=JobTable)
    other_events: Counter = field(default_factory=Counter)

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
        self.table.put(job)

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


@dataclass
class Recovered:
    """What a successful recovery produced.

    ``view`` is a ``FrozenView`` (v1) or an ``EpochView`` (Store v2, ``store_version`` 2);
    ``reducer`` is the v2 reducer after the epoch (its allocator and entity revisions), if
    the consumer took part in the reduction.
    """

    view: Any
    records_replayed: int
    journal: Journal | None
    consumer: Consumer
    store_version: int = 1
    reducer: Any = None


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

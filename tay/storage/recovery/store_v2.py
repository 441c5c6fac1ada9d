"""Store-v2 recovery (storage.md §3.7): select the epoch CURRENT names, check it, replay it.

Pass 1 (``preflight_v2``) classifies the root (§3.1), reads STORE, STORE-V2 and CURRENT,
binds them to the MANIFEST (``verify_selection``), lists the epoch, checks every base file's
size and SHA-256 against the MANIFEST *before* scanning it, scans every segment and checks
the base summaries and the topology. Pass 2 (``replay_v2``) checks the record profile
(base: (7,1) snapshots, their (31,2) attachments, then (30,2) checkpoints; tail: (8,1)
mutations and (30,2) events) and feeds each record to the ``EpochReducer``. Revalidation
(``revalidate_v2``) re-lists the root and the epoch and re-reads the three markers and the
MANIFEST: all must be identical to pass 1 (names, inodes, sizes, bytes). A refusal changes no
byte. An epoch is never chosen by mtime, never merged with another, and candidates, old
epochs and legacy directories are ignored.

A consumer takes part in the reduction through three methods: ``epoch_job(job_id)``,
``epoch_install(job_state)`` and ``epoch_entity(revision, event)`` (the engine and
``TableConsumer`` have them), and optionally ``epoch_install_row(row)`` to keep terminal
base jobs as rows until first read (``tay.storage.v2.rows``; with it, runs of finished base
jobs are replayed in columns, and ``epoch_install_rows(jobs)`` may install a whole run), and
``epoch_install_tail(jobs, inserted)`` with ``epoch_counters(stamp, ready,
skipped_timers)`` to take the tail's common job lifecycles in columns (``_tail_run``,
``tay.storage.v2.tail``). A plain
``consumer(sequence, type, schema, payload)`` is fed the physical records instead (profile
checks only).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from tay._frozen import Record
from tay.failures import RecoveryRefused, StorageFailure
from tay import _native
from tay._native import _pure_base as bj
from tay._native import _pure_tail as tl
from tay.storage.formats import segment, store_marker
from tay.storage.formats.record_table import RecordTable
from tay.storage.formats.value import DecodeLimits, locate
from tay.storage.fsio import RealIO
from tay.storage.recovery.limits import RecoveryOptions, RecoveryTimer
from tay.storage.formats.segment_ledger import LEDGER_FILE_NAME
from tay.storage.recovery.physical import (
    HeldSegments, ScanPass, SegmentView, check_ledger, drop_pages, scan_one,
)
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.epoch_records import (
    EPOCH_EVENT_PAIR, JOB_ATTACHMENT_PAIR, decode_epoch_event, decode_job_attachment,
)
from tay.storage.v2.manifest import Manifest, verify_selection
from tay.storage.v2.markers import CURRENT_SIZE, MARKER_SIZE, decode_current
from tay.storage.v2.records import MUTATION_PAIR, SNAPSHOT_PAIR, decode_mutation, decode_snapshot
from tay.storage.v2.fast import decode_batch
from tay.storage.v2.reducer import EpochReducer
from tay.storage.v2.rows import BaseJobs, BaseSource, ResultRow, base_live_rows
from tay.storage.v2.tail import TailJobs, executing_rows, failed_row, live_row, retried_row

_HASH_CHUNK = 1 << 20
_BATCH = 256  # records decoded per native call in replay (bounds what is held at once)
_FIRST_SMALL = 2  # records decoded where a base run stopped: a lone live job's snapshot and
# the next record (its attachment, or the next run's first job)
_RUN_WORTH = 64  # records a base run takes for the next stop to decode a small batch again
BASE_PAIRS = frozenset({SNAPSHOT_PAIR, JOB_ATTACHMENT_PAIR, EPOCH_EVENT_PAIR})
TAIL_PAIRS = frozenset({MUTATION_PAIR, EPOCH_EVENT_PAIR})


def read_small(io: RealIO, path: str, limit: int, stage: str) -> bytes:
    """A small published object (at most ``limit`` + 1 bytes are read), no symlinks."""
    try:
        fd = io.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise RecoveryRefused("discovery", "missing_object", path=path, stage=stage) from None
    try:
        data = io.read_at(fd, limit + 1, 0)
    finally:
        io.close(fd)
    return data


class EpochView(HeldSegments, Record):
    """Pass 1 of a Store-v2 recovery: what replay reads and revalidation must find again."""

    __slots__ = ("root", "store_id", "markers", "manifest_bytes", "manifest", "epoch",
                 "segments", "next_sequence", "record_count", "exhausted", "ledger")
    root: v2_layout.RootInventory | None  # None: an epoch read on its own (a candidate)
    store_id: bytes
    markers: tuple[bytes, bytes, bytes]  # STORE, STORE-V2, CURRENT as read
    manifest_bytes: bytes
    manifest: Manifest
    epoch: v2_layout.EpochInventory
    segments: list[SegmentView]
    next_sequence: int
    record_count: int
    exhausted: bool
    ledger: Any  # the root's SEGMENT-LEDGER (a segment_ledger.Ledger), if any

    def __init__(self, root: v2_layout.RootInventory | None, store_id: bytes,
                 markers: tuple[bytes, bytes, bytes], manifest_bytes: bytes, manifest: Manifest,
                 epoch: v2_layout.EpochInventory, segments: list[SegmentView],
                 next_sequence: int, record_count: int, exhausted: bool,
                 ledger: Any = None) -> None:
        self.root = root
        self.store_id = store_id
        self.markers = markers
        self.manifest_bytes = manifest_bytes
        self.manifest = manifest
        self.epoch = epoch
        self.segments = segments
        self.next_sequence = next_sequence
        self.record_count = record_count
        self.exhausted = exhausted
        self.ledger = ledger

    @property
    def epoch_id(self) -> bytes:
        return self.manifest.epoch_id

    @property
    def base_count(self) -> int:
        return len(self.manifest.base_segments)

    @property
    def base_bytes(self) -> int:
        return sum(s.size for s in self.segments[:self.base_count])

    @property
    def tail_bytes(self) -> int:
        return sum(s.size for s in self.segments[self.base_count:])

    def key(self) -> tuple:
        return (self.root.fingerprint if self.root is not None else None,
                self.epoch.fingerprint, self.markers, self.manifest_bytes,
                self.segments_key(), self.next_sequence)


def _markers(io: RealIO, root: v2_layout.RootInventory, stage: str) -> tuple[bytes, bytes, bytes]:
    for name in (store_marker.STORE_FILE_NAME, v2_layout.STORE_V2_NAME, v2_layout.CURRENT_NAME):
        if name not in root.names:
            raise RecoveryRefused("discovery", f"missing_{name.lower().replace('-', '_')}",
                                  path=root.path(name), stage=stage)
    return (read_small(io, root.path(store_marker.STORE_FILE_NAME), MARKER_SIZE, stage),
            read_small(io, root.path(v2_layout.STORE_V2_NAME), MARKER_SIZE, stage),
            read_small(io, root.path(v2_layout.CURRENT_NAME), CURRENT_SIZE, stage))


def file_sha256(io: RealIO, path: str, size: int) -> bytes:
    digest = hashlib.sha256()
    fd = io.open(path, os.O_RDONLY)
    try:
        offset = 0
        while offset < size:
            piece = io.read_at(fd, min(_HASH_CHUNK, size - offset), offset)
            if not piece:
                break
            digest.update(piece)
            offset += len(piece)
    finally:
        io.close(fd)
    return digest.digest()


def preflight_v2(io: RealIO, root_path: str, options: RecoveryOptions,
                 keep_mappings: bool = True, timer: RecoveryTimer | None = None,
                 stage: str = "preflight", highest_length: int | None = None) -> EpochView:
    """Pass 1 of §3.7: a complete physical validation of the selected epoch, read-only.

    ``highest_length``: judge the epoch's highest (tail) segment as if it ended there
    (``tay storage repair``; nothing is changed)."""
    run = ScanPass(options, timer or RecoveryTimer(options), stage, keep_mappings)
    root = v2_layout.classify_root(io, root_path, options.max_directory_entries)
    run.timer.check(stage, path=root_path)
    markers = _markers(io, root, stage)
    try:
        store_id = store_marker.decode_store_marker(markers[0], root.path("STORE"))
        current = decode_current(markers[2])
    except StorageFailure as failure:
        raise locate(failure, stage=stage) from None
    epoch_name = v2_layout.epoch_dir_name(current.epoch_id)
    if current.epoch_id not in root.epochs:
        raise RecoveryRefused("discovery", "current_epoch_missing", stage=stage,
                              path=os.path.join(root.epochs_path, epoch_name))
    epoch = v2_layout.classify_epoch(io, os.path.join(root.epochs_path, epoch_name),
                                     options.max_directory_entries)
    manifest_path = os.path.join(epoch.path, v2_layout.MANIFEST_NAME)
    manifest_bytes = read_small(io, manifest_path, v2_layout.MANIFEST_MAX, stage)
    try:
        manifest = verify_selection(store_id, markers[1], markers[2], manifest_bytes)
    except StorageFailure as failure:
        raise locate(failure, path=failure.path or manifest_path, stage=stage) from None
    run.timer.check(stage, path=manifest_path)
    view = _read_epoch(io, epoch, manifest_bytes, manifest, store_id, run, highest_length)
    view.root, view.markers = root, markers
    try:
        if LEDGER_FILE_NAME in root.names:  # tail segments beyond the first are listed only there
            view.ledger = check_ledger(io, root_path, store_id, manifest.epoch_id,
                                       view.segments, epoch.segment_path, stage)
        again = v2_layout.classify_root(io, root_path, options.max_directory_entries)
        if again.fingerprint != root.fingerprint:
            raise RecoveryRefused("changed_view", "directory_changed_during_preflight",
                                  path=root_path, stage=stage)
    except BaseException:
        view.close()
        raise
    return view


def revalidate_v2(io: RealIO, root_path: str, options: RecoveryOptions, view: EpochView,
                  timer: RecoveryTimer) -> None:
    """§3.7 step 8: re-list the root and re-read STORE, STORE-V2 and CURRENT, which must be
    byte-identical to pass 1; the selected epoch's listing (every segment's name, inode and
    size) and its MANIFEST bytes must be too. The segments' contents are not scanned or
    hashed again: pass 1 checked them under the owner lock this recovery still holds (a full
    second pass doubled the physical work of every start; v1 keeps it, §7 step 6)."""
    stage = "revalidation"
    root = v2_layout.classify_root(io, root_path, options.max_directory_entries)
    timer.check(stage, path=root_path)
    markers = _markers(io, root, stage)
    if markers != view.markers:
        raise RecoveryRefused("changed_view", "authority_changed", path=root_path, stage=stage)
    epoch = v2_layout.classify_epoch(io, view.epoch.path, options.max_directory_entries)
    manifest_path = os.path.join(epoch.path, v2_layout.MANIFEST_NAME)
    manifest_bytes = read_small(io, manifest_path, v2_layout.MANIFEST_MAX, stage)
    timer.check(stage, path=manifest_path)
    assert view.root is not None
    if (root.fingerprint, epoch.fingerprint, manifest_bytes) != \
            (view.root.fingerprint, view.epoch.fingerprint, view.manifest_bytes):
        raise RecoveryRefused("changed_view", "store_changed_during_recovery", path=root_path,
                              stage=stage)


def read_epoch_dir(io: RealIO, epoch_path: str, store_id: bytes, options: RecoveryOptions,
                   keep_mappings: bool = True) -> EpochView:
    """Pass 1 over one epoch directory on its own (a candidate before publication): the
    same checks as a selected epoch, minus the root and CURRENT."""
    from tay.storage.v2.manifest import decode_manifest

    run = ScanPass(options, RecoveryTimer(options), "verification", keep_mappings)
    epoch = v2_layout.classify_epoch(io, epoch_path, options.max_directory_entries)
    manifest_path = os.path.join(epoch_path, v2_layout.MANIFEST_NAME)
    manifest_bytes = read_small(io, manifest_path, v2_layout.MANIFEST_MAX, run.stage)
    try:
        manifest = decode_manifest(manifest_bytes)
    except StorageFailure as failure:
        raise locate(failure, path=manifest_path, stage=run.stage) from None
    if manifest.store_id != store_id:
        raise RecoveryRefused("discovery", "store_id_mismatch", path=manifest_path,
                              stage=run.stage)
    return _read_epoch(io, epoch, manifest_bytes, manifest, store_id, run)


def _read_epoch(io: RealIO, epoch: v2_layout.EpochInventory, manifest_bytes: bytes,
                manifest: Manifest, store_id: bytes, run: ScanPass,
                highest_length: int | None = None) -> EpochView:
    views = _scan_epoch(io, epoch, manifest, store_id, run, highest_length)
    try:
        next_sequence, exhausted = _check_topology(views, manifest, epoch, run.stage)
        again = v2_layout.classify_epoch(io, epoch.path, run.options.max_directory_entries)
        if again.fingerprint != epoch.fingerprint:
            raise RecoveryRefused("changed_view", "directory_changed_during_preflight",
                                  path=epoch.path, stage=run.stage)
    except BaseException:
        for view in views:
            if view.mapping is not None:
                view.mapping.close()
        raise
    return EpochView(None, store_id, (b"", b"", b""), manifest_bytes, manifest, epoch, views,
                     next_sequence, sum(v.scan.count for v in views), exhausted)


def _scan_epoch(io: RealIO, epoch: v2_layout.EpochInventory, manifest: Manifest,
                store_id: bytes, run: ScanPass,
                highest_length: int | None = None) -> list[SegmentView]:
    base = manifest.base_segments
    if len(epoch.segment_ids) < len(base) + 1:
        raise RecoveryRefused("discovery", "missing_tail", path=epoch.segments_path,
                              stage=run.stage, base_segments=len(base),
                              found=len(epoch.segment_ids))
    views: list[SegmentView] = []
    try:
        highest = epoch.segment_ids[-1]
        records = 0
        for segment_id in epoch.segment_ids:
            path = epoch.segment_path(segment_id)
            last = segment_id == highest
            if segment_id <= len(base):
                view = _scan_base_file(io, path, segment_id, base[segment_id - 1], epoch,
                                       store_id, last, run)
            else:
                view = scan_one(io, path, segment_id, store_id, last, run,
                                highest_length if last else None)
            views.append(view)
            records += view.scan.count
            if run.options.max_replay_records is not None and \
                    records > run.options.max_replay_records:
                raise RecoveryRefused("resource_limit", "max_replay_records", path=path,
                                      segment_id=segment_id, stage=run.stage)
        total = sum(v.size for v in views)
        limit = run.options.max_total_segment_bytes
        if limit is not None and total > limit:
            raise RecoveryRefused("resource_limit", "max_total_segment_bytes",
                                  path=epoch.segments_path, stage=run.stage, total=total)
    except BaseException:
        for view in views:
            if view.mapping is not None:
                view.mapping.close()
        raise
    return views


def _scan_base_file(io: RealIO, path: str, segment_id: int, entry: Any,
                    epoch: v2_layout.EpochInventory, store_id: bytes, last: bool,
                    run: ScanPass) -> SegmentView:
    """§3.7 step 6: a base file's size and SHA-256 against the MANIFEST, then its scan.

    The digest is taken from the scan's own mapping, a window at a time as the scan walks
    it (one read of the file instead of two, no copies), and compared before anything the
    scan found is used. A file the scan refuses is hashed on its own, and a wrong digest
    is the refusal, as when the digest came first: the outcome is the same either way."""
    size = epoch.segment_sizes[entry.id]
    if size != entry.bytes:
        raise RecoveryRefused("physical_corruption", "base_segment_size", path=path,
                              segment_id=entry.id, stage=run.stage, expected=entry.bytes,
                              found=size)
    digest = hashlib.sha256()
    try:
        view = scan_one(io, path, segment_id, store_id, last, run, digest=digest)
    except StorageFailure:
        if file_sha256(io, path, size) != entry.digest:
            raise _digest_mismatch(path, entry, run.stage) from None
        raise
    if digest.digest() != entry.digest:
        if view.mapping is not None:
            view.mapping.close()
        raise _digest_mismatch(path, entry, run.stage)
    return view


def _digest_mismatch(path: str, entry: Any, stage: str) -> RecoveryRefused:
    return RecoveryRefused("physical_corruption", "base_segment_digest", path=path,
                           segment_id=entry.id, stage=stage)


def _check_topology(views: list[SegmentView], manifest: Manifest,
                    epoch: v2_layout.EpochInventory, stage: str) -> tuple[int, bool]:
    for view, entry in zip(views, manifest.base_segments):
        scan = view.scan
        if scan.state != "sealed" or scan.first_sequence != entry.first_sequence or \
                scan.last_sequence != entry.last_sequence:
            raise RecoveryRefused("physical_corruption", "base_segment_summary", path=view.path,
                                  segment_id=view.segment_id, stage=stage,
                                  state=scan.state, first=scan.first_sequence,
                                  last=scan.last_sequence, expected_first=entry.first_sequence,
                                  expected_last=entry.last_sequence)
    try:
        topology = segment.topology_check([v.scan for v in views], [v.path for v in views])
    except StorageFailure as failure:
        raise locate(failure, stage=stage) from None
    tail = views[len(manifest.base_segments)]
    if tail.scan.first_sequence != manifest.tail_first_sequence:
        raise RecoveryRefused("continuity", "tail_first_sequence", path=tail.path,
                              segment_id=tail.segment_id, stage=stage,
                              expected=manifest.tail_first_sequence,
                              found=tail.scan.first_sequence)
    return topology.next_sequence, topology.exhausted


# ---- pass 2: the record profile and the reducer ------------------------------------------

class _Dispatch:
    """Decode one epoch record of the right region and hand it to the reducer."""

    def __init__(self, reducer: EpochReducer, limits: DecodeLimits) -> None:
        self.reducer = reducer
        self.limits = limits

    def base(self, pair: tuple[int, int], payload: memoryview) -> None:
        if pair == SNAPSHOT_PAIR:
            self.reducer.snapshot(decode_snapshot(payload, self.limits))
        elif pair == JOB_ATTACHMENT_PAIR:
            self.reducer.attachment(decode_job_attachment(payload, self.limits))
        else:
            self.reducer.checkpoint(decode_epoch_event(payload, self.limits))

    def tail(self, pair: tuple[int, int], payload: memoryview) -> None:
        if pair == MUTATION_PAIR:
            self.reducer.mutation(decode_mutation(payload, self.limits))
        else:
            self.reducer.event(decode_epoch_event(payload, self.limits))

    def decoded(self, pair: tuple[int, int], record: Any, in_base: bool) -> None:
        """A record the native fast path decoded (what the exact decoder would return)."""
        if pair == MUTATION_PAIR:
            self.reducer.mutation(record)
        elif pair == SNAPSHOT_PAIR:
            self.reducer.snapshot_state(record)  # the JobState job_of gives, or a JobRow
        elif pair == JOB_ATTACHMENT_PAIR:
            if type(record) is ResultRow:
                self.reducer.attachment_row(record)
            else:
                self.reducer.attachment(record)
        elif in_base:
            self.reducer.checkpoint(record)
        else:
            self.reducer.event(record)


def profile_refusal(pair: tuple[int, int], region: str) -> RecoveryRefused:
    reason = "record_profile" if pair in BASE_PAIRS | TAIL_PAIRS else "payload_schema"
    return RecoveryRefused("unsupported_semantics", reason, region=region,
                           event_type=pair[0], schema=pair[1])


def _at_record(failure: StorageFailure, offset: int, where: dict) -> RecoveryRefused:
    """The refusal located in its file: a payload offset becomes a file offset, and a
    refusal with no offset of its own points at the record."""
    if failure.offset is None:
        return RecoveryRefused(failure.kind, failure.reason, offset=offset, **where,
                               **failure.extra)
    return locate(failure, base_offset=offset + 24, **where)


def replay_v2(view: EpochView, consumer: Any, limits: DecodeLimits,
              timer: RecoveryTimer | None = None) -> tuple[int, EpochReducer | None]:
    """Pass 2: every record in sequence order, profile-checked, through the reducer."""
    reducer = None
    dispatch = None
    if hasattr(consumer, "epoch_install"):
        reducer = EpochReducer(consumer.epoch_job, consumer.epoch_install,
                               consumer.epoch_entity, getattr(consumer, "epoch_install_row", None),
                               getattr(consumer, "epoch_install_rows", None),
                               getattr(consumer, "epoch_install_tail", None),
                               getattr(consumer, "epoch_counters", None),
                               getattr(consumer, "epoch_install_live", None),
                               getattr(consumer, "epoch_install_base_live", None),
                               getattr(consumer, "epoch_drop_held", None))
        dispatch = _Dispatch(reducer, limits)
    elif not callable(consumer):
        raise RecoveryRefused("unsupported_physical", "consumer_cannot_read_store_v2",
                              stage="replay", consumer=type(consumer).__name__)
    base_count = view.base_count
    expected = 1
    for index, segment_view in enumerate(view.segments):
        in_base = index < base_count
        if not in_base and reducer is not None and reducer.in_base:
            reducer.end_base()
        expected = _replay_segment(segment_view, in_base, expected, consumer, dispatch,
                                   limits, timer, base_goes_on=index + 1 < base_count)
    if reducer is not None and reducer.in_base:
        reducer.end_base()
    return expected - 1, reducer


def _replay_segment(segment_view: SegmentView, in_base: bool, expected: int, consumer: Any,
                    dispatch: _Dispatch | None, limits: DecodeLimits,
                    timer: RecoveryTimer | None, base_goes_on: bool = False) -> int:
    """Replay one segment's records from global sequence ``expected``; returns the next.
    ``base_goes_on``: a base segment the next segment of the base follows (its first
    records may be the attachments of this one's last job).

    In a base, runs of finished jobs go through the columnar replay (``_base_run``) when
    the consumer keeps rows; every record it does not take goes the record-by-record way."""
    allowed = BASE_PAIRS if in_base else TAIL_PAIRS
    mapping = segment_view.mapping
    buffer = memoryview(mapping) if mapping is not None else memoryview(b"")
    records = segment_view.scan.records
    columnar = (in_base and dispatch is not None and mapping is not None
                and dispatch.reducer.install_row is not None and isinstance(records, RecordTable))
    tail_columns = (not in_base and dispatch is not None and mapping is not None
                    and dispatch.reducer.install_tail is not None
                    and isinstance(records, RecordTable))
    batch: list = []  # the descriptors of records first.. (and decoded: their fast path)
    decoded: list = []
    first = 0  # index of batch[0] in records
    dropped = 0  # pages below this offset were released
    held_from: list[BaseSource] = []  # the segment, opened once for the runs kept in columns
    texts: dict[bytes, str] = {}  # the live rows' queue and worker keys decoded so far
    count = len(records)
    position = 0
    # A base orders its jobs by id, so its live jobs (available, scheduled, retryable...)
    # stand one by one among the finished ones. Where a base run stopped at one (or a run
    # tried there took nothing: ``no_run``) the next batch decodes only ``small`` records
    # (and on to the next job's snapshot, where a run may start), ``small`` doubled until a
    # run takes ``_RUN_WORTH`` records or more, so a run in columns starts
    # again right after a lone live job, while dense live jobs (short runs, each paying a
    # native call) and stretches of them still go in full batches.
    no_run, small = -1, _FIRST_SMALL
    # a tail walk that held nothing (every job it took left the common lifecycle) leaves
    # the records it took to the record-by-record way, the walk not tried again before them
    walk_from = 0
    try:
        while position < count:
            # a run in columns (a base's finished jobs, a tail's common lifecycles) where
            # the record-by-record way stands between batches
            taken = position
            if (columnar or tail_columns) and position - first >= len(batch) \
                    and records.first_sequence + position == expected and position != no_run \
                    and position >= walk_from:
                if columnar and dispatch.reducer.takes_base_jobs:
                    taken = _base_run(mapping, records, position, dispatch.reducer, limits,
                                      segment_view, held_from, texts, base_goes_on)
                    if taken < min(count, position + _RUN):  # stopped before its cap
                        no_run = taken
                    if taken - position >= _RUN_WORTH:
                        small = _FIRST_SMALL
                elif tail_columns:
                    taken, held = _tail_run(mapping, buffer, records, position, dispatch,
                                            limits, segment_view, held_from)
                    if taken < 0:  # an inserted id is held already: the exact way from here
                        tail_columns = False
                        taken = position
                    elif not held:
                        walk_from, taken = taken, position
                if taken > position:
                    expected += taken - position
                    position = taken
                    offset = records.offsets[position - 1]
                    if offset > dropped:
                        drop_pages(mapping, dropped, offset)
                        dropped = offset
                    if timer is not None:
                        timer.check("replay", path=segment_view.path,
                                    sequence=expected - 1, segment_id=segment_view.segment_id)
                    batch = []
                    first = position
                    continue
            # one record the record-by-record way, its batch's descriptors read at once
            if position - first >= len(batch):
                first = position
                size = _BATCH
                if position == no_run:  # where a base run stopped: up to a job's start
                    size, small = _to_next_job(records, position, small), min(_BATCH, 2 * small)
                batch = list(records.batch(first, first + size)) \
                    if isinstance(records, RecordTable) else records[first:first + size]
                if dispatch is not None:  # the batch through the native fast path
                    offset = batch[0][0]
                    if mapping is not None and offset > dropped:
                        # records before this one are decoded into objects: their pages
                        # need not stay resident (the peak RSS of a replay)
                        drop_pages(mapping, dropped, offset)
                        dropped = offset
                    decoded = decode_batch(buffer, [(o + 24, n, t, s) for o, t, s, _, n in batch],
                                           limits, dispatch.reducer.install_row is not None)
            offset, rtype, schema, sequence, length = batch[position - first]
            if sequence != expected:
                raise RecoveryRefused("continuity", "global_sequence", offset=offset,
                                      expected=expected, **_where(segment_view, sequence))
            pair = (rtype, schema)
            if pair not in allowed:
                raise _at_record(profile_refusal(pair, "base" if in_base else "tail"),
                                 offset, _where(segment_view, sequence))
            record = decoded[position - first] if dispatch is not None else None
            try:
                if record is not None:
                    dispatch.decoded(pair, record, in_base)
                else:
                    _exact(buffer[offset + 24: offset + 24 + length], pair, sequence,
                           consumer, dispatch, in_base)
            except StorageFailure as failure:
                raise _at_record(failure, offset, _where(segment_view, sequence)) from None
            expected += 1
            position += 1
            if timer is not None and expected % 4096 == 0:
                timer.check("replay", path=segment_view.path, sequence=sequence,
                            segment_id=segment_view.segment_id)
        if mapping is not None and segment_view.size:
            drop_pages(mapping, 0, segment_view.size)
    finally:
        buffer.release()
    return expected


# records per columnar call (the recovery timer is checked between calls); a run's mapped
# pages stay resident until it is installed: 1,024 records (~0.9 MB of the reference base)
# keep that small while the loop stack imports beside recovery (4,096: +1.9 MiB peak RSS)
_RUN = 1024


def _base_run(mapping: Any, records: RecordTable, position: int, reducer: EpochReducer,
              limits: DecodeLimits, segment_view: SegmentView,
              held_from: list[BaseSource], texts: dict[bytes, str],
              base_goes_on: bool = False) -> int:
    """The finished jobs from ``position`` on, taken in one native call and installed in
    columns (``tay._native.base_jobs``, ``EpochReducer.base_jobs``), and with a consumer
    that holds them (``takes_base_live``) the live jobs among them as rows
    (``BaseLiveRow``; ``texts``: their keys decoded so far); returns the index of the first
    record not taken (``position`` when none was). Sequences are the table's
    (``first_sequence + index``, which the caller checked at ``position``), and the pairs
    taken, (7,1) and (31,2), are base pairs. A consumer that keeps the runs in columns
    reads their snapshots and results from the segment later (``BaseSource``, opened once
    per segment in ``held_from``), not from a copy made now. ``base_goes_on``: the next
    segment is the base's too (its first records may belong to this one's last job)."""
    stop = min(len(records), position + _RUN)
    # the records past the range may be the last job's attachments: at the run's cap, when
    # one follows (a job without any, a cancelled or a live one, puts the later jobs out of
    # step with the cap), or at the segment's end, when the base goes on (it rolls at its
    # rotation target wherever that falls); the walk then leaves that job to the exact way
    open_end = base_goes_on if stop == len(records) \
        else records.types[stop] == JOB_ATTACHMENT_PAIR[0]
    taken, columns, live = _native.base_jobs(
        mapping, records.offsets, records.lengths, records.types, records.schemas, position,
        stop, reducer.last_job_id, limits.depth, limits.nodes, limits.binary,
        take_live=reducer.takes_base_live, open_end=open_end)
    rows = None
    if live:
        rows = base_live_rows(mapping, live, limits, texts)
        fresh = reducer.fresh_orders(rows)
        if fresh < len(rows):  # an order given out before: the exact way refuses it there
            k = fresh * bj.BASE_LIVE
            taken, columns = live[k + bj.LIVE_RECORD], columns[:live[k + bj.BEFORE] * bj.BASE_JOB]
            rows, live = rows[:fresh], live[:k]
    if columns or rows:
        source = None
        if reducer.install_rows is not None and columns:
            if not held_from:
                held_from.append(BaseSource(segment_view.path, segment_view.inode))
            source = held_from[0]
        reducer.base_jobs(BaseJobs(mapping, columns, limits, source=source), rows,
                          live[bj.BEFORE::bj.BASE_LIVE])
    return taken


# a retried job's eight records (tay.storage.v2.tail.retried_row), as its live row names them
_RETRIED_RECORDS = (tl.RECORD, tl.START, tl.DETAILS, tl.FINISH, tl.RETRY, tl.RESTART,
                    tl.RESULT, tl.COMPLETE)


def _to_next_job(records: Any, position: int, least: int) -> int:
    """How many records from ``position`` to the first base job's snapshot at least
    ``least`` records on (a job's attachments follow its snapshot), at most ``_BATCH``: a
    batch that ends there leaves the next run to start at a snapshot."""
    types, end = records.types, min(len(records), position + least)
    limit = min(len(records), position + _BATCH)
    while end < limit and types[end] != SNAPSHOT_PAIR[0]:
        end += 1
    return end - position


def _tail_run(mapping: Any, buffer: memoryview, records: RecordTable, position: int,
              dispatch: _Dispatch, limits: DecodeLimits, segment_view: SegmentView,
              held_from: list[BaseSource]) -> tuple[int, bool]:
    """The tail's common job lifecycles from ``position`` on, walked in one native call
    (``tay._native.tail_jobs``): the jobs whose four records it took are installed in
    columns (``TailJobs``), and the records it took of the other jobs are replayed the exact
    way, in order, with the consumer's stamp and ready counters and the allocator where the
    record-by-record replay has them; a job of which it took only the insert is handed to
    the consumer as its ``LiveRow`` (``install_live``) in its insert's place instead, one
    of which it took the insert and start as an ``ExecutingRow`` (built from both), and one
    a worker failure left retryable or discarded as a ``FailedRow`` in its last record's
    place.
    Returns the index of the first record not taken (``position``: none), or -1 when an id
    it saw inserted is one the consumer holds (the record-by-record replay refuses it where
    it stands), and whether the run held any job: one that held none (every job it took
    left the common lifecycle: cancels, timeouts...) replays nothing, and the caller's
    record-by-record way, cheaper per record than the pending replay below, takes the
    records up to the index."""
    reducer = dispatch.reducer
    first_order = reducer.next_order
    taken, next_order, columns, links, pending, totals, live = _native.tail_jobs(
        mapping, records.offsets, records.lengths, records.types, records.schemas, position,
        len(records), first_order, limits.depth, limits.nodes, limits.binary)
    install_live = reducer.install_live
    if taken == position:
        return position, True  # nothing taken: the exact way from here
    if not columns and not (live and install_live is not None):
        return taken, False
    offsets, types = records.offsets, records.types
    inserted = [bytes(buffer[offsets[i] + 24:offsets[i] + 40]) for i in pending[::4]
                if types[i] == 8 and buffer[offsets[i] + 40] == 1]
    if columns and not held_from:  # the consumer reads the done jobs' records later
        held_from.append(BaseSource(segment_view.path, segment_view.inode))
    counters = reducer.install_tail(TailJobs(mapping, columns, links, limits,
                                             source=held_from[0] if columns else None),
                                    inserted)
    if counters is None:
        return -1, True
    stamp, ready = counters
    # the jobs left available at their insert are held as rows, and those left executing at
    # their start are built from both records in a batch, in their insert's place, not
    # replayed one record at a time (the walk vouched for each record: the step apply and
    # the allocator accept); such a job's start is skipped. A job left retryable or
    # discarded by a worker failure is held as a row in its last record's place (where
    # replay's last timer push is), its other three records skipped
    held: dict[int, int] = {}
    executing: dict[int, int] = {}  # insert index -> row, of the jobs left executing
    starts: set[int] = set()  # their starts and the failed jobs' other records, skipped
    if install_live is not None:
        held.update(zip(live[tl.RECORD::tl.TAIL_LIVE], range(0, len(live), tl.TAIL_LIVE)))
        states = live[tl.STATE::tl.TAIL_LIVE]
        if states.count(tl.AVAILABLE) + states.count(tl.SCHEDULED) != len(states):
            for k in range(0, len(live), tl.TAIL_LIVE):  # (nothing per job on a backlog)
                state = live[k + tl.STATE]
                if state == tl.EXECUTING:
                    executing[live[k + tl.RECORD]] = k
                    starts.add(live[k + tl.START])
                elif state == tl.COMPLETED:  # a retried job's success: at its last record
                    spans = [live[k + slot] for slot in _RETRIED_RECORDS]
                    del held[live[k + tl.RECORD]]
                    held[max(spans)] = k
                    starts.update(spans)
                    starts.discard(max(spans))
                elif state == tl.RETRYABLE or state == tl.DISCARDED:
                    finish, details = live[k + tl.FINISH], live[k + tl.DETAILS]
                    del held[live[k + tl.RECORD]]
                    held[max(finish, details)] = k
                    starts.update((live[k + tl.RECORD], live[k + tl.START],
                                   min(finish, details), live[k + tl.AVAILABILITY_RECORD]))
    texts: dict[bytes, str] = {}
    lengths = records.lengths
    dropped = 0  # the held jobs' records are read from the segment: their pages can go
    # the timer pushes replay makes for held jobs (a done delayed job's insert, a retried
    # success's failure), stale by the end and not made, passed so far
    skipped = 0
    for first in range(0, len(pending), 4 * _BATCH):  # decoded a batch at a time, as below
        chunk = pending[first:first + 4 * _BATCH]
        indexes = chunk[::4]
        if offsets[indexes[0]] > dropped:
            drop_pages(mapping, dropped, offsets[indexes[0]])
            dropped = offsets[indexes[0]]
        described = [records[i] for i in indexes if i not in held and i not in starts]
        built = {}  # the jobs left executing whose insert is in this batch, built together
        if executing:
            rows = [executing[i] for i in indexes if i in executing]
            if rows:
                built = dict(zip(rows, executing_rows(buffer, offsets, lengths, live, rows,
                                                      limits, stamp)))
        decoded = decode_batch(buffer, [(o + 24, n, t, s) for o, t, s, _, n in described],
                               limits, reducer.install_row is not None) if described else []
        j = 0
        for k, index in enumerate(indexes):
            reducer.counters(stamp + chunk[4 * k + 1], ready + chunk[4 * k + 2],
                             chunk[4 * k + 3] - skipped)
            skipped = chunk[4 * k + 3]
            at = held.get(index)
            if at is not None:
                if built and at in built:
                    install_live(built[at])
                elif live[at + tl.STATE] == tl.COMPLETED:
                    install_live(retried_row(buffer, offsets, lengths, live, at, limits,
                                             texts, stamp))
                elif live[at + tl.STATE] in (tl.RETRYABLE, tl.DISCARDED):
                    install_live(failed_row(buffer, offsets, lengths, live, at, limits, texts,
                                            stamp))
                else:
                    install_live(live_row(buffer, offsets, lengths, live, at, limits, texts))
                continue
            if starts and index in starts:  # built (executing) or held (failed) already
                continue
            offset, rtype, schema, sequence, length = described[j]
            record = decoded[j]
            j += 1
            pair = (rtype, schema)
            try:
                if record is None:
                    payload = buffer[offset + 24:offset + 24 + length]
                    record = decode_mutation(payload, limits) if pair == MUTATION_PAIR \
                        else decode_epoch_event(payload, limits)
                # the allocator where the walk had it: each ready push before the record
                # took its next order (an (8,1)'s own, checked by the walk; a requeue's or
                # an expedite's, which carries none, from the allocator)
                reducer.next_order = first_order + chunk[4 * k + 2]
                dispatch.decoded(pair, record, False)
            except StorageFailure as failure:
                raise _at_record(failure, offset, _where(segment_view, sequence)) from None
    reducer.counters(stamp + totals[0], ready + totals[1], totals[2] - skipped)
    reducer.next_order = next_order
    return taken, True


def _exact(payload: memoryview, pair: tuple[int, int], sequence: int, consumer: Any,
           dispatch: _Dispatch | None, in_base: bool) -> None:
    """One record through the exact decoders (or a plain consumer's own)."""
    try:
        if dispatch is None:
            consumer(sequence, pair[0], pair[1], payload)
        elif in_base:
            dispatch.base(pair, payload)
        else:
            dispatch.tail(pair, payload)
    finally:
        payload.release()


def _where(segment_view: SegmentView, sequence: int) -> dict:
    """Where a refused record is, as every replay refusal names it."""
    return dict(path=segment_view.path, segment_id=segment_view.segment_id,
                sequence=sequence, stage="replay")

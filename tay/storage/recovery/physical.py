"""Pass-1 pieces both recoveries share (v1 ``recover`` and Store-v2 ``store_v2``): a mapped,
windowed scan of one segment (its pages handed back as they are walked), the scanned views,
the SEGMENT-LEDGER check, and the torn-tail refusals that name ``tay storage repair``."""

from __future__ import annotations

import mmap
import os
from typing import Any, Callable

from tay._frozen import Record
from tay.failures import RecoveryRefused, StorageFailure
from tay.storage import layout
from tay.storage.formats import segment, segment_ledger
from tay.storage.formats.value import locate
from tay.storage.fsio import RealIO
from tay.storage.journal.writer import Tail
from tay.storage.recovery.limits import RecoveryOptions, RecoveryTimer

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


class SegmentView(Record):
    """One scanned segment: its identity, state and record descriptors."""

    __slots__ = ("segment_id", "path", "inode", "size", "scan", "mapping")
    segment_id: int
    path: str
    inode: int
    size: int
    scan: segment.SegmentScan
    mapping: mmap.mmap | None

    def __init__(self, segment_id: int, path: str, inode: int, size: int, scan: segment.SegmentScan,
                 mapping: mmap.mmap | None) -> None:
        self.segment_id = segment_id
        self.path = path
        self.inode = inode
        self.size = size
        self.scan = scan
        self.mapping = mapping


class HeldSegments:
    """What a pass-1 view of any store shape holds: scanned segments (with their mappings),
    the store id and the next sequence. Subclasses are value classes with those fields."""

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


class ScanPass(Record):
    """What one physical pass needs besides the store: limits, clock, stage, mappings."""

    __slots__ = ("options", "timer", "stage", "keep_mappings")
    options: RecoveryOptions
    timer: RecoveryTimer
    stage: str  # "preflight" or "revalidation"
    keep_mappings: bool

    def __init__(self, options: RecoveryOptions, timer: RecoveryTimer, stage: str,
                 keep_mappings: bool) -> None:
        self.options = options
        self.timer = timer
        self.stage = stage
        self.keep_mappings = keep_mappings


def scan_one(io: RealIO, path: str, segment_id: int, store_id: bytes,
              highest: bool, run: ScanPass, length: int | None = None,
              digest: Any = None) -> SegmentView:
    """Map and scan one segment; ``length`` scans only its first bytes (``tay storage
    repair`` judging the store as it would be without a torn tail; nothing is changed).
    ``digest`` (a hashlib object) takes in the whole file's bytes from the same mapping, a
    window at a time as the scan walks it (no second read of the file, no copy), once the
    scan succeeded; the caller compares it before using anything the scan found."""
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
    windows = _WindowDone(mapping, run, path, segment_id, digest)
    try:
        run.timer.check(run.stage, path=path, segment_id=segment_id, offset=0)
        scan = segment.scan_segment(
            buffer, segment_id=segment_id, store_id=store_id,
            highest=highest, budget=run.options.max_decode_payload_bytes, path=path,
            release=windows)
        windows.hash_to(size)  # what the walk did not cover: the footer, or the whole file
    except StorageFailure as failure:
        windows.close()
        _close_mapping(mapping, buffer)
        raise locate(failure, path=path, segment_id=segment_id, stage=run.stage) from None
    windows.close()
    if isinstance(buffer, memoryview):
        buffer.release()
    if mapping is not None:
        drop_pages(mapping, 0, info.st_size)  # the footer's tail page; replay faults pages back
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


def drop_pages(mapping: mmap.mmap, start: int, end: int) -> None:
    """Release the whole pages of ``[start, end)`` from this process's resident set.

    The mapping is shared and read-only, so the data stays valid: a later access faults
    the same bytes back in from the page cache.
    """
    first = -(-start // _PAGE) * _PAGE
    last = end // _PAGE * _PAGE if end < len(mapping) else len(mapping)
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)


class _WindowDone:
    """``release`` for a windowed scan: feeds a digest the bytes walked (if one is kept),
    drops the whole pages of a mapping once walked, then checks the time limits (a scan
    window is one I/O step)."""

    __slots__ = ("mapping", "dropped", "run", "path", "segment_id", "digest", "view", "hashed")

    def __init__(self, mapping: mmap.mmap | None, run: ScanPass, path: str,
                 segment_id: int, digest: Any = None) -> None:
        self.mapping = mapping
        self.dropped = 0  # every page below this offset is already handed back
        self.run, self.path, self.segment_id = run, path, segment_id
        self.digest = digest
        self.view = memoryview(mapping) if digest is not None and mapping is not None else None
        self.hashed = 0  # the digest has taken in every byte below this offset

    def hash_to(self, end: int) -> None:
        if self.view is not None and end > self.hashed:
            self.digest.update(self.view[self.hashed:end])  # hashlib releases the GIL
            self.hashed = end

    def close(self) -> None:
        """Let go of the view, so the mapping can be closed."""
        if self.view is not None:
            self.view.release()
            self.view = None

    def __call__(self, start: int, end: int) -> None:
        self.hash_to(end)  # before the pages are dropped: no fault brings them back
        last = end // _PAGE * _PAGE
        if self.mapping is not None and last > self.dropped:
            self.mapping.madvise(mmap.MADV_DONTNEED, self.dropped, last - self.dropped)
            self.dropped = last
        self.run.timer.check(self.run.stage, path=self.path, segment_id=self.segment_id,
                             offset=end)


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

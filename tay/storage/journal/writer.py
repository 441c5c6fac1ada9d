"""The v1 journal writer: open-ready, batched append, path checks and rotation (§2.8-2.9).

Write protocol (docs/journal.md has the full picture):

- ``init_store`` (``tay.storage.journal.setup``) creates a new store.
- ``Journal.open`` (called by recovery's activation with the validated tail) runs the
  open-ready barriers and opens the active segment writable at its validated EOF, or creates
  the successor of a sealed highest segment.
- ``append_batch`` writes a whole batch of frames with one ``pwrite`` per segment touched,
  verifies size and read-back, and rotates (seal + successor, ``tay.storage.journal.rotation``)
  *before* a frame that would cross the rotation target. ``sync`` is the per-batch barrier
  (fdatasync in ``sync`` mode).

Any failed or short write, or failed sync, poisons the journal: it raises ``WriterStopped``
then and on every later call. Nothing is ever retried or overwritten. Before it stops, the
writer cuts the active segment back to its size at the last barrier (``committed_size``:
open, successor, or the last ``sync``) and fsyncs it, so a disk that fills up in the middle
of a ``pwrite`` leaves no torn record: every byte it removes belongs to a batch that was
never acknowledged.
"""

from __future__ import annotations

import os
from typing import Sequence

from tay import _native
from tay._frozen import Frozen, set_field
from tay.failures import StorageFailure, WriterStopped
from tay.storage import layout
from tay.storage.fsio import RealIO
from tay.storage.formats.segment_ledger import V1_EPOCH
from tay.storage.journal.ledger import LedgerWriter
from tay.storage.journal.rotation import (
    DEFAULT_ROTATION_TARGET,
    MAX_ROTATION_TARGET,
    MIN_ROTATION_TARGET,
    check_rotation_target,
    publish_successor,
    rotation_needed,
    seal_segment,
)
from tay.storage.journal.setup import (
    DURABILITY_MODES,
    SYNC_FILESYSTEMS,
    VOLATILE_PREFIXES,
    WRITE_FILESYSTEMS,
    argument_refusal,
    check_durability,
    fsync_file,
    init_store,
    io_failure,
    nearest_existing_ancestor,
    new_store_id,
    publish_staged,
)
from tay.storage.formats.record import MAX_SEQUENCE
from tay.storage.formats.segment import FOOTER_SIZE, HEADER_SIZE, MAX_SEGMENT_ID, SegmentHeader, segment_file_name

__all__ = [
    "Journal", "JournalRecord", "Receipt", "Tail", "init_store", "check_durability",
    "check_rotation_target", "rotation_needed", "DEFAULT_ROTATION_TARGET", "MIN_ROTATION_TARGET",
    "MAX_ROTATION_TARGET", "DURABILITY_MODES", "SYNC_FILESYSTEMS", "WRITE_FILESYSTEMS",
    "VOLATILE_PREFIXES", "fsync_file", "publish_staged", "nearest_existing_ancestor",
    "new_store_id",
]

JournalRecord = tuple[int, int, int, bytes]  # (sequence, type, schema, payload)


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return (stat.st_ino, stat.st_dev)


class Receipt(Frozen):
    """Where a batch landed. ``durable`` is False until the covering sync has returned."""

    __slots__ = ("segment_id", "offset", "first_sequence", "last_sequence", "count",
                 "durability")
    segment_id: int
    offset: int
    first_sequence: int
    last_sequence: int
    count: int
    durability: str

    def __init__(self, segment_id: int, offset: int, first_sequence: int, last_sequence: int,
                 count: int, durability: str) -> None:
        set_field(self, "segment_id", segment_id)
        set_field(self, "offset", offset)
        set_field(self, "first_sequence", first_sequence)
        set_field(self, "last_sequence", last_sequence)
        set_field(self, "count", count)
        set_field(self, "durability", durability)


class Tail:
    """The validated tail recovery hands to ``Journal.open``."""

    __slots__ = ("store_id", "segment_id", "first_sequence", "size", "record_count",
                 "segment_crc", "sealed", "next_sequence")

    def __init__(self, store_id: bytes, segment_id: int, first_sequence: int, size: int,
                 record_count: int, segment_crc: int, sealed: bool,
                 next_sequence: int) -> None:
        self.store_id = store_id
        self.segment_id = segment_id
        self.first_sequence = first_sequence
        self.size = size  # file size of the highest segment
        self.record_count = record_count
        self.segment_crc = segment_crc  # CRC32C of bytes [0:size) (footer excluded)
        self.sealed = sealed
        self.next_sequence = next_sequence


class Journal:
    """The single writer of one open store. Not thread-safe: one caller (the committer)."""

    def __init__(self, io: RealIO, root: str, lock: layout.StoreLock, tail: Tail,
                 durability: str, rotation_target: int, segments_dir: str | None = None,
                 epoch_id: bytes = V1_EPOCH) -> None:
        self.io = io
        self.root = root
        # the directory of segment files this journal appends to: ``segments/`` of a v1
        # store, ``epochs/e-<id>/segments`` of a Store-v2 epoch (Store v2 decides which)
        self.segments_dir = segments_dir or os.path.join(root, layout.SEGMENTS_DIR)
        relative = os.path.relpath(self.segments_dir, root)
        if relative.startswith(".."):
            raise ValueError("the segments directory must be inside the store root")
        self.dir_chain = relative.split(os.sep)  # directories from root down to segments
        self.epoch_id = epoch_id  # whose segments/ it is, for SEGMENT-LEDGER (zero: v1)
        self.lock = lock
        self.store_id = tail.store_id
        self.durability = durability
        self.rotation_target = rotation_target
        self.segment_id = tail.segment_id
        self.first_sequence = tail.first_sequence
        self.size = tail.size
        self.record_count = tail.record_count
        self.segment_crc = tail.segment_crc
        self.next_sequence = tail.next_sequence
        # the active segment's size at the last barrier (open, successor, sync): every byte
        # before it may have been acknowledged, no byte after it ever was
        self.committed_size = tail.size
        self.fd = -1
        self.ledger: LedgerWriter | None = None  # SEGMENT-LEDGER: every segment created
        self.root_fd = -1  # pinned so a swapped root or segments/ is noticed (§4)
        self.dir_fds: list[int] = []  # each directory of dir_chain, pinned
        self.segments_fd = -1  # the last of dir_fds
        self._pinned: list[tuple[int, int]] = []  # (st_ino, st_dev) of the held descriptors
        self._pinned_for: tuple[int, ...] | None = None  # the descriptors they belong to
        self.stopped: WriterStopped | None = None
        self.syncs = 0
        self.history_bytes = 0  # every segment file's size, footers included

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, io: RealIO, root: str, lock: layout.StoreLock, tail: Tail, *,
             durability: str = "sync", rotation_target: int = DEFAULT_ROTATION_TARGET,
             segments_dir: str | None = None, epoch_id: bytes = V1_EPOCH) -> "Journal":
        """Run the open-ready barriers and position at the tail (activation, §7 step 7).

        ``segments_dir`` / ``epoch_id``: a Store-v2 epoch's tail instead of ``segments/``."""
        journal = cls(io, os.path.abspath(root), lock, tail, durability, rotation_target,
                      segments_dir, epoch_id)
        # the session now mutates: prove no-replace rename before the first publication
        layout.probe_noreplace_rename(io, journal.root)
        journal._guard(journal._open_ready, tail.sealed)
        journal._guard(journal.check_paths)
        return journal

    def _open_ready(self, sealed: bool) -> None:
        self.root_fd = self.io.open_dir(self.root)
        path = self.root
        for name in self.dir_chain:
            path = os.path.join(path, name)
            self.dir_fds.append(self.io.open_dir(path))
        self.segments_fd = self.dir_fds[-1]
        self.history_bytes = sum(self.io.lstat(self._segment_path(segment_id)).st_size
                                 for segment_id in range(1, self.segment_id + 1))
        fsync_file(self.io, os.path.join(self.root, layout.STORE_NAME))
        self.io.fsync_dir(self.root)
        self.io.fsync_dir(self.segments_dir)
        # a ledger that lags (a store from upstream or an older tay, a crash between STORE
        # and the ledger) records the current highest before anything is appended
        self.ledger = LedgerWriter.open(self.io, self.root, self.store_id, self.epoch_id)
        self.ledger.record(self.segment_id, self.first_sequence)
        if sealed:
            self._create_successor()
            return
        self.fd = self.io.open(self._segment_path(self.segment_id), os.O_RDWR)
        self.io.fsync(self.fd)
        if self.io.fstat(self.fd).st_size != self.size:
            raise OSError(5, "active segment size changed since recovery")
        self.committed_size = self.size

    def _segment_path(self, segment_id: int) -> str:
        return os.path.join(self.segments_dir, segment_file_name(segment_id))

    # -- poisoning --------------------------------------------------------------------
    def _check_running(self) -> None:
        if self.stopped is not None:
            raise self.stopped

    def _guard(self, operation, *args, writes: bool = False):  # type: ignore[no-untyped-def]
        """Run one I/O step; any OSError poisons the journal for good.

        ``writes``: the step writes or syncs the active segment, so a failure may have left
        bytes past ``committed_size``; they are cut back before the journal stops.
        """
        self._check_running()
        try:
            return operation(*args)
        except OSError as error:
            self.stopped = io_failure(operation.__name__.strip("_"), error,
                                       error.filename or self._segment_path(self.segment_id))
            if writes:
                self.stopped.extra.update(self._cut_back())
            self._close_fd()
            raise self.stopped from None
        except StorageFailure as failure:
            if isinstance(failure, WriterStopped):
                self.stopped = failure
                self._close_fd()
            raise

    # -- appending --------------------------------------------------------------------
    def append_batch(self, records: Sequence[JournalRecord]) -> Receipt:
        """Write ``records`` (sequences continuing the journal) and return where they went.

        Not durable until ``sync()`` returns. A batch may span a rotation; frames never do.
        """
        self._check_running()
        if not records:
            raise argument_refusal("empty_batch")
        for index, (sequence, *_rest) in enumerate(records):
            if sequence != self.next_sequence + index:
                raise argument_refusal("sequence_discontinuity", sequence=sequence,
                                expected=self.next_sequence + index, index=index)
        return self._guard(self._append, records, writes=True)

    def _append(self, records: Sequence[JournalRecord]) -> Receipt:
        chunk: list[JournalRecord] = []
        chunk_bytes = 0
        first_location: tuple[int, int] | None = None
        for record in records:
            frame_size = 28 + len(record[3])
            if rotation_needed(self.size + chunk_bytes, frame_size, self.rotation_target):
                if chunk:
                    self._write_frames(chunk)
                    chunk, chunk_bytes = [], 0
                self._rotate()
            if first_location is None:
                first_location = (self.segment_id, self.size)
            chunk.append(record)
            chunk_bytes += frame_size
        self._write_frames(chunk)
        assert first_location is not None
        return Receipt(first_location[0], first_location[1], records[0][0], records[-1][0],
                       len(records), self.durability)

    def _write_frames(self, chunk: list[JournalRecord]) -> None:
        frames = _native.encode_records([(t, schema, seq, payload) for seq, t, schema, payload in chunk])
        offset = self.size
        self.io.write_all_at(self.fd, frames, offset)
        if self.io.fstat(self.fd).st_size != offset + len(frames):
            raise OSError(5, "size after write does not match", self._segment_path(self.segment_id))
        if self.io.read_at(self.fd, len(frames), offset) != frames:
            raise OSError(5, "read-back does not match the written frames", self._segment_path(self.segment_id))
        self.segment_crc = _native.crc32c(frames, self.segment_crc)
        self.history_bytes += len(frames)
        self.size = offset + len(frames)
        self.record_count += len(chunk)
        self.next_sequence = chunk[-1][0] + 1

    def sync(self) -> None:
        """The barrier before any acknowledgement (§2.9 append steps 3-4).

        ``fdatasync`` of the active segment in ``sync`` mode, then in both modes the check
        that the store's paths still name the inodes this session holds.
        """
        self._check_running()
        if self.durability == "sync":
            self._guard(self._fdatasync, writes=True)
        self._guard(self.check_paths)
        self.committed_size = self.size

    def check_paths(self) -> None:
        """Poison the journal unless root, ``segments/``, the active segment and the lock
        still name the inodes held open (§4: the held inode vs fstatat of its name).

        The root is looked up by its full path; the others by one name inside their pinned
        parent, which is itself checked, so each lookup is a single-component ``fstatat``.
        An open descriptor's inode never changes, so the held identities are fstat'ed once
        per set of descriptors (again after a rotation), not after every batch; the lock's
        link count comes from the name's stat, which is the same inode once it matched.
        """
        io = self.io
        held_fds = (self.root_fd, *self.dir_fds, self.fd, self.lock.fd, self.segment_id)
        if self._pinned_for != held_fds:
            self._pinned = [_identity(io.fstat(fd)) for fd in held_fds[:-1]]
            self._pinned_for = held_fds
        parents = (self.root_fd, *self.dir_fds[:-1])
        names = ((None, self.root), *zip(parents, self.dir_chain),
                 (self.segments_fd, segment_file_name(self.segment_id)),
                 (self.root_fd, layout.LOCK_NAME))
        for pinned, (parent_fd, name) in zip(self._pinned, names):
            try:
                named = io.lstat(name) if parent_fd is None else io.lstat_at(parent_fd, name)
            except FileNotFoundError:
                named = None
            if named is None or _identity(named) != pinned:
                raise WriterStopped("changed_view", "path_changed", name=name,
                                    path=os.path.join(self.root, name), segment_id=self.segment_id)
        if named.st_nlink != 1:  # the lock (checked last): no second name may reach it
            raise WriterStopped("changed_view", "path_changed", path=self.lock.path,
                                links=named.st_nlink)

    def _fdatasync(self) -> None:
        self.io.fdatasync(self.fd)
        self.syncs += 1

    def _cut_back(self) -> dict[str, int | str]:
        """After a failed write or sync: truncate the active segment to ``committed_size``
        and fsync it, so no torn (never acknowledged) frame is left for recovery to refuse.

        Returns facts for the ``WriterStopped`` report: ``cut_back_bytes`` removed, or
        ``cut_back_failed`` with its errno (the journal stops either way; recovery then
        refuses the torn tail and ``tay storage repair`` removes it).
        """
        if self.fd < 0:
            return {}
        try:
            size = self.io.fstat(self.fd).st_size
            if size <= self.committed_size:
                return {}
            self.io.truncate(self.fd, self.committed_size)
            self.io.fsync(self.fd)
        except OSError as error:
            return {"cut_back_failed": os.strerror(error.errno) if error.errno else str(error),
                    "cut_back_errno": error.errno or 0}
        return {"cut_back_to": self.committed_size, "cut_back_bytes": size - self.committed_size}

    # -- seal and successor (R0-R7, tay.storage.journal.rotation) ------------------------
    def rotate(self) -> bool:
        """Seal a non-empty active segment and publish its empty successor (a compaction
        freezing its source, §3.8). An empty active segment is left as it is: False."""
        self._check_running()
        if self.size == HEADER_SIZE:
            return False
        self._guard(self._rotate)
        return True

    def _rotate(self) -> None:
        if self.segment_id >= MAX_SEGMENT_ID or self.next_sequence > MAX_SEQUENCE:
            raise WriterStopped("resource_limit", "store_exhausted", segment_id=self.segment_id)
        self._seal()
        self._create_successor()

    def _seal(self) -> None:
        header = SegmentHeader(self.segment_id, self.first_sequence, self.store_id)
        seal_segment(self.io, self.fd, self._segment_path(self.segment_id), header, self.size,
                     self.record_count, self.segment_crc)
        self.history_bytes += FOOTER_SIZE
        self._close_fd()

    def _create_successor(self) -> None:
        self.fd, header = publish_successor(self.io, self.segments_dir, self.segment_id,
                                            self.next_sequence, self.store_id)
        self.history_bytes += HEADER_SIZE
        self.segment_id += 1
        self.first_sequence = self.next_sequence
        self.size = self.committed_size = HEADER_SIZE  # published and fsynced (R4-R5)
        self.record_count = 0
        self.segment_crc = _native.crc32c(header)
        # durably on disk now (rename + directory fsync); recorded before any record goes in
        assert self.ledger is not None
        self.ledger.record(self.segment_id, self.first_sequence)

    # -- closing ----------------------------------------------------------------------
    def _close_fd(self) -> None:
        if self.fd >= 0:
            try:
                self.io.close(self.fd)
            except OSError:
                pass
            self.fd = -1

    def close(self, *, release_lock: bool = True) -> None:
        """Close the active segment and the pinned directories and release the owner lock
        (no implicit sync). ``release_lock=False`` keeps the lock for the same owner's next
        journal (a compaction switching epochs)."""
        self._close_fd()
        if self.ledger is not None:
            self.ledger.close()
        for fd in (self.root_fd, *self.dir_fds):
            if fd >= 0:
                os.close(fd)
        self.root_fd = self.segments_fd = -1
        self.dir_fds = []
        if release_lock:
            self.lock.release()
        if self.stopped is None:
            self.stopped = WriterStopped("io", "journal_closed", path=self.root)

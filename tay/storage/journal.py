"""The v1 journal writer: bootstrap, open-ready, batched append, seal and rotation (§2.8-2.9).

Write protocol (docs/journal.md has the full picture):

- ``init_store`` creates a new store: owner lock, ``segments/``, staged + published segment 1
  (empty, FIRST=1), staged + published ``STORE``, each step followed by the fsyncs of §2.9.
  It refuses any directory that already holds history (it never repairs).
- ``Journal.open`` (called by recovery's activation with the validated tail) runs the
  open-ready barriers and opens the active segment writable at its validated EOF, or creates
  the successor of a sealed highest segment.
- ``append_batch`` writes a whole batch of frames with one ``pwrite`` per segment touched,
  verifies size and read-back, and rotates (seal + successor) *before* a frame that would
  cross the rotation target. ``sync`` is the per-batch barrier (fdatasync in ``sync`` mode).

Any failed or short write, or failed sync, poisons the journal: it raises ``WriterStopped``
then and on every later call. Nothing is ever retried, truncated or overwritten.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Sequence

from tay import _native
from tay.failures import RecoveryRefused, StorageFailure, WriterStopped
from tay.storage import layout
from tay.storage.fsio import RealIO
from tay.storage.record import MAX_SEQUENCE
from tay.storage.segment import (
    FOOTER_SIZE,
    HEADER_SIZE,
    MAX_SEGMENT_ID,
    SegmentHeader,
    encode_footer,
    encode_header,
    segment_file_name,
    staging_file_name,
)
from tay.storage.store_marker import encode_store_marker, store_staging_name

DURABILITY_MODES = ("sync", "write")
DEFAULT_ROTATION_TARGET = 67_108_864
_SEAL_READ = 1 << 20  # bytes per read when the seal re-checks the file's CRC
MIN_ROTATION_TARGET = 16_777_352  # header + largest frame + footer
MAX_ROTATION_TARGET = 1_073_741_824

EXT4_MAGIC, XFS_MAGIC, BTRFS_MAGIC = 0xEF53, 0x58465342, 0x9123683E
TMPFS_MAGIC, OVERLAY_MAGIC = 0x01021994, 0x794C7630
SYNC_FILESYSTEMS = {EXT4_MAGIC: "ext2/3/4", XFS_MAGIC: "xfs", BTRFS_MAGIC: "btrfs"}
WRITE_FILESYSTEMS = {**SYNC_FILESYSTEMS, TMPFS_MAGIC: "tmpfs", OVERLAY_MAGIC: "overlayfs"}
VOLATILE_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm")

JournalRecord = tuple[int, int, int, bytes]  # (sequence, type, schema, payload)


def _argument(reason: str, path: str | None = None, **extra: object) -> RecoveryRefused:
    return RecoveryRefused("argument", reason, path=path, stage="validation", **extra)


def rotation_needed(active_size: int, frame_size: int, rotation_target: int) -> bool:
    """§2.8: seal before a frame that would leave no room for the footer within the target;
    an empty active segment (header only) never rotates."""
    return active_size != HEADER_SIZE and active_size + frame_size + FOOTER_SIZE > rotation_target


def check_rotation_target(value: int, *, allow_below_minimum_for_tests: bool = False) -> int:
    """Validate ``rotation_target_bytes`` (§2.8). The test escape hatch lowers only the floor."""
    floor = 44 + 28 + FOOTER_SIZE if allow_below_minimum_for_tests else MIN_ROTATION_TARGET
    if not isinstance(value, int) or not floor <= value <= MAX_ROTATION_TARGET:
        raise _argument("rotation_target_bytes_out_of_range", value=value, minimum=floor,
                        maximum=MAX_ROTATION_TARGET)
    return value


def check_durability(io: RealIO, data_dir: str, durability: str, validated_filesystem: bool) -> None:
    """Refuse a durability mode the platform, path or filesystem cannot honour (§4, §8)."""
    if durability not in DURABILITY_MODES:
        raise _argument("unknown_durability", durability=durability)
    path = os.path.abspath(data_dir)
    probe = nearest_existing_ancestor(path)
    if durability == "sync":
        if not sys.platform.startswith("linux"):
            raise _argument("sync_requires_linux", platform=sys.platform)
        if not validated_filesystem:
            raise _argument("sync_requires_validated_filesystem", path=path)
        real = os.path.realpath(path)
        for prefix in VOLATILE_PREFIXES:
            if real == prefix or real.startswith(prefix + "/"):
                raise _argument("sync_refuses_volatile_path", path=path, prefix=prefix)
    allowed = SYNC_FILESYSTEMS if durability == "sync" else WRITE_FILESYSTEMS
    try:
        magic = io.filesystem_magic(probe)
    except OSError as error:
        raise _argument("filesystem_probe_failed", path=probe, error=error.strerror) from None
    if magic not in allowed:
        raise _argument("unsupported_filesystem", path=probe, durability=durability,
                        filesystem_magic=hex(magic), allowed=sorted(allowed.values()))


def nearest_existing_ancestor(path: str) -> str:
    """``path`` itself if it exists, else its closest existing parent (what init creates under)."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def new_store_id() -> bytes:
    """A fresh 16-byte CSPRNG identity; the all-zero value is invalid and redrawn."""
    while True:
        value = os.urandom(16)
        if any(value):
            return value


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return (stat.st_ino, stat.st_dev)


def _io_failure(action: str, error: OSError, path: str | None = None) -> WriterStopped:
    code = os.strerror(error.errno) if error.errno else str(error)
    return WriterStopped("io", f"{action}_failed", path=path, errno=error.errno, error=code)


def fsync_file(io: RealIO, path: str) -> None:
    """fsync ``path`` through a read-only descriptor (a published file we do not write)."""
    fd = io.open(path, os.O_RDONLY)
    try:
        io.fsync(fd)
    finally:
        io.close(fd)


def publish_staged(io: RealIO, directory: str, staging_name: str, final_name: str, data: bytes) -> None:
    """Stage ``data`` O_EXCL, fsync, close, no-replace rename, fsync the directory (§2.9)."""
    staging = os.path.join(directory, staging_name)
    fd = io.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        io.write_all_at(fd, data, 0)
        if io.fstat(fd).st_size != len(data):
            raise OSError(5, "staged size mismatch", staging)
        io.fsync(fd)
    finally:
        io.close(fd)
    io.rename_noreplace(directory, staging_name, final_name)
    io.fsync_dir(directory)


def init_store(
    data_dir: str,
    durability: str = "sync",
    validated_filesystem: bool = False,
    *,
    io: RealIO | None = None,
    store_id: bytes | None = None,
) -> bytes:
    """Bootstrap a new, empty store at ``data_dir`` (§2.9) and return its STORE_ID.

    The directory may be missing (it is created) or empty; anything else is refused with
    ``RecoveryRefused`` kind ``argument``/reason ``existing_store`` and left untouched.
    """
    io = io or RealIO()
    root = os.path.abspath(data_dir)
    check_durability(io, root, durability, validated_filesystem)
    if os.path.isdir(root) and set(os.listdir(root)) - {layout.LOCK_NAME}:
        # refuse before even creating the lock: a non-empty directory is left as it was
        raise RecoveryRefused("argument", "existing_store", path=root, stage="validation",
                              entries=sorted(os.listdir(root))[:8])
    if not os.path.lexists(root):
        # create every missing ancestor too, each made durable in its parent
        missing = []
        walk = root
        while not os.path.lexists(walk):
            missing.append(walk)
            walk = os.path.dirname(walk)
        try:
            for directory in reversed(missing):
                io.mkdir(directory, 0o755)
                io.fsync_dir(os.path.dirname(directory))
        except OSError as error:
            raise _argument("cannot_create_data_dir", path=directory, error=error.strerror) from None
    lock = layout.acquire_lock(io, root, create=True, fsync_ancestors=True)
    try:
        inventory = layout.classify(io, root)
        leftovers = [*inventory.unrelated, *inventory.staging]
        if inventory.has_store or inventory.has_segments_dir or leftovers:
            raise RecoveryRefused("argument", "existing_store", path=root, stage="validation",
                                  entries=sorted(leftovers)[:8])
        store_id = store_id or new_store_id()
        try:
            _bootstrap(io, root, store_id)
        except OSError as error:
            raise _io_failure("bootstrap", error, root) from None
        layout.classify(io, root)  # re-inspect: the published tree must classify cleanly
        return store_id
    finally:
        lock.release()


def _bootstrap(io: RealIO, root: str, store_id: bytes) -> None:
    segments = os.path.join(root, layout.SEGMENTS_DIR)
    io.mkdir(segments, 0o755)
    io.fsync_dir(root)
    publish_staged(io, segments, staging_file_name(1, os.urandom(16)),
                   segment_file_name(1), encode_header(1, 1, store_id))
    fsync_file(io, os.path.join(segments, segment_file_name(1)))
    io.fsync_dir(segments)
    publish_staged(io, root, store_staging_name(os.urandom(16)),
                   layout.STORE_NAME, encode_store_marker(store_id))


@dataclass(frozen=True)
class Receipt:
    """Where a batch landed. ``durable`` is False until the covering sync has returned."""

    segment_id: int
    offset: int
    first_sequence: int
    last_sequence: int
    count: int
    durability: str


@dataclass
class Tail:
    """The validated tail recovery hands to ``Journal.open``."""

    store_id: bytes
    segment_id: int
    first_sequence: int
    size: int  # file size of the highest segment
    record_count: int
    segment_crc: int  # CRC32C of the highest segment's bytes [0:size) (footer excluded)
    sealed: bool
    next_sequence: int


class Journal:
    """The single writer of one open store. Not thread-safe: one caller (the committer)."""

    def __init__(self, io: RealIO, root: str, lock: layout.StoreLock, tail: Tail,
                 durability: str, rotation_target: int) -> None:
        self.io = io
        self.root = root
        self.segments_dir = os.path.join(root, layout.SEGMENTS_DIR)
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
        self.fd = -1
        self.root_fd = -1  # pinned so a swapped root or segments/ is noticed (§4)
        self.segments_fd = -1
        self._pinned: list[tuple[int, int]] = []  # (st_ino, st_dev) of the held descriptors
        self._pinned_for: tuple[int, ...] | None = None  # the descriptors they belong to
        self.stopped: WriterStopped | None = None
        self.syncs = 0
        self.history_bytes = 0  # every segment file's size, footers included

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, io: RealIO, root: str, lock: layout.StoreLock, tail: Tail, *,
             durability: str = "sync", rotation_target: int = DEFAULT_ROTATION_TARGET) -> "Journal":
        """Run the open-ready barriers and position at the tail (activation, §7 step 7)."""
        journal = cls(io, os.path.abspath(root), lock, tail, durability, rotation_target)
        # the session now mutates: prove no-replace rename before the first publication
        layout.probe_noreplace_rename(io, journal.root)
        journal._guard(journal._open_ready, tail.sealed)
        journal._guard(journal.check_paths)
        return journal

    def _open_ready(self, sealed: bool) -> None:
        self.root_fd = self.io.open_dir(self.root)
        self.segments_fd = self.io.open_dir(self.segments_dir)
        self.history_bytes = sum(self.io.lstat(self._segment_path(segment_id)).st_size
                                 for segment_id in range(1, self.segment_id + 1))
        fsync_file(self.io, os.path.join(self.root, layout.STORE_NAME))
        self.io.fsync_dir(self.root)
        self.io.fsync_dir(self.segments_dir)
        if sealed:
            self._create_successor()
            return
        self.fd = self.io.open(self._segment_path(self.segment_id), os.O_RDWR)
        self.io.fsync(self.fd)
        if self.io.fstat(self.fd).st_size != self.size:
            raise OSError(5, "active segment size changed since recovery")

    def _segment_path(self, segment_id: int) -> str:
        return os.path.join(self.segments_dir, segment_file_name(segment_id))

    # -- poisoning --------------------------------------------------------------------
    def _check_running(self) -> None:
        if self.stopped is not None:
            raise self.stopped

    def _guard(self, operation, *args):  # type: ignore[no-untyped-def]
        """Run one I/O step; any OSError poisons the journal for good."""
        self._check_running()
        try:
            return operation(*args)
        except OSError as error:
            self.stopped = _io_failure(operation.__name__.strip("_"), error,
                                       error.filename or self._segment_path(self.segment_id))
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
            raise _argument("empty_batch")
        for index, (sequence, *_rest) in enumerate(records):
            if sequence != self.next_sequence + index:
                raise _argument("sequence_discontinuity", sequence=sequence,
                                expected=self.next_sequence + index, index=index)
        return self._guard(self._append, records)

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
            self._guard(self._fdatasync)
        self._guard(self.check_paths)

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
        held_fds = (self.root_fd, self.segments_fd, self.fd, self.lock.fd, self.segment_id)
        if self._pinned_for != held_fds:
            self._pinned = [_identity(io.fstat(fd)) for fd in held_fds[:4]]
            self._pinned_for = held_fds
        names = ((None, self.root), (self.root_fd, layout.SEGMENTS_DIR),
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

    # -- seal and successor (R0-R7) ---------------------------------------------------
    def _rotate(self) -> None:
        if self.segment_id >= MAX_SEGMENT_ID or self.next_sequence > MAX_SEQUENCE:
            raise WriterStopped("resource_limit", "store_exhausted", segment_id=self.segment_id)
        self._seal()
        self._create_successor()

    def _seal(self) -> None:
        path = self._segment_path(self.segment_id)
        # R0: the file must still be exactly what we believe we wrote
        if self.io.fstat(self.fd).st_size != self.size:
            raise OSError(5, "segment size changed before seal", path)
        if self._file_crc() != self.segment_crc:
            raise OSError(5, "segment bytes changed before seal", path)
        header = SegmentHeader(self.segment_id, self.first_sequence, self.store_id)
        footer = encode_footer(header, self.record_count, self.segment_crc)
        self.io.write_all_at(self.fd, footer, self.size)  # R1
        if self.io.fstat(self.fd).st_size != self.size + FOOTER_SIZE:
            raise OSError(5, "size after footer write does not match", path)
        self.io.fsync(self.fd)  # R2
        self.history_bytes += FOOTER_SIZE
        self._close_fd()

    def _file_crc(self) -> int:
        """CRC32C of the active file's ``size`` bytes, read in bounded pieces (a segment
        may be up to 1 GiB; the writer never holds more than one piece)."""
        crc, offset = 0, 0
        while offset < self.size:
            piece = self.io.read_at(self.fd, min(_SEAL_READ, self.size - offset), offset)
            if not piece:
                raise OSError(5, "segment shorter than its recorded size")
            crc = _native.crc32c(piece, crc)
            offset += len(piece)
        return crc

    def _create_successor(self) -> None:
        fsync_file(self.io, self._segment_path(self.segment_id))  # R3
        successor = self.segment_id + 1
        header = encode_header(successor, self.next_sequence, self.store_id)
        publish_staged(self.io, self.segments_dir,  # R4, R5
                       staging_file_name(successor, os.urandom(16)),
                       segment_file_name(successor), header)
        path = self._segment_path(successor)
        fd = self.io.open(path, os.O_RDWR)  # R7 (after the R6 check below)
        if self.io.fstat(fd).st_size != HEADER_SIZE or self.io.read_at(fd, HEADER_SIZE, 0) != header:
            self.io.close(fd)
            raise OSError(5, "published successor is not the expected empty segment", path)
        self.fd = fd
        self.history_bytes += HEADER_SIZE
        self.segment_id = successor
        self.first_sequence = self.next_sequence
        self.size = HEADER_SIZE
        self.record_count = 0
        self.segment_crc = _native.crc32c(header)

    # -- closing ----------------------------------------------------------------------
    def _close_fd(self) -> None:
        if self.fd >= 0:
            try:
                self.io.close(self.fd)
            except OSError:
                pass
            self.fd = -1

    def close(self) -> None:
        """Close the active segment and the pinned directories, release the owner lock
        (no implicit sync)."""
        self._close_fd()
        for fd in (self.root_fd, self.segments_fd):
            if fd >= 0:
                os.close(fd)
        self.root_fd = self.segments_fd = -1
        self.lock.release()
        if self.stopped is None:
            self.stopped = WriterStopped("io", "journal_closed", path=self.root)

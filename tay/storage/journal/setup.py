"""Store bootstrap: durability/filesystem checks, staged publication and ``init_store`` (§2.9).

``init_store`` creates a new store: owner lock, ``segments/``, staged + published segment 1
(empty, FIRST=1), staged + published ``STORE``, each step followed by the fsyncs of §2.9.
It refuses any directory that already holds history (it never repairs).
"""

from __future__ import annotations

import os
import sys

from tay.failures import RecoveryRefused, WriterStopped
from tay.storage import layout
from tay.storage.fsio import DIR_MODE, FILE_MODE, RealIO
from tay.storage.journal.ledger import LedgerWriter
from tay.storage.formats.segment import encode_header, segment_file_name, staging_file_name
from tay.storage.formats.store_marker import encode_store_marker, store_staging_name

DURABILITY_MODES = ("sync", "write")

EXT4_MAGIC, XFS_MAGIC, BTRFS_MAGIC = 0xEF53, 0x58465342, 0x9123683E
TMPFS_MAGIC, OVERLAY_MAGIC = 0x01021994, 0x794C7630
SYNC_FILESYSTEMS = {EXT4_MAGIC: "ext2/3/4", XFS_MAGIC: "xfs", BTRFS_MAGIC: "btrfs"}
WRITE_FILESYSTEMS = {**SYNC_FILESYSTEMS, TMPFS_MAGIC: "tmpfs", OVERLAY_MAGIC: "overlayfs"}
VOLATILE_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm")


def argument_refusal(reason: str, path: str | None = None, **extra: object) -> RecoveryRefused:
    """A ``RecoveryRefused`` of kind ``argument`` (bad caller input, found at validation)."""
    return RecoveryRefused("argument", reason, path=path, stage="validation", **extra)


def check_durability(io: RealIO, data_dir: str, durability: str, validated_filesystem: bool) -> None:
    """Refuse a durability mode the platform, path or filesystem cannot honour (§4, §8)."""
    if durability not in DURABILITY_MODES:
        raise argument_refusal("unknown_durability", durability=durability)
    path = os.path.abspath(data_dir)
    probe = nearest_existing_ancestor(path)
    if durability == "sync":
        if not sys.platform.startswith("linux"):
            raise argument_refusal("sync_requires_linux", platform=sys.platform)
        if not validated_filesystem:
            raise argument_refusal("sync_requires_validated_filesystem", path=path)
        real = os.path.realpath(path)
        for prefix in VOLATILE_PREFIXES:
            if real == prefix or real.startswith(prefix + "/"):
                raise argument_refusal("sync_refuses_volatile_path", path=path, prefix=prefix)
    allowed = SYNC_FILESYSTEMS if durability == "sync" else WRITE_FILESYSTEMS
    try:
        magic = io.filesystem_magic(probe)
    except OSError as error:
        raise argument_refusal("filesystem_probe_failed", path=probe, error=error.strerror) from None
    if magic not in allowed:
        raise argument_refusal("unsupported_filesystem", path=probe, durability=durability,
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


def io_failure(action: str, error: OSError, path: str | None = None) -> WriterStopped:
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
    fd = io.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
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
                io.mkdir(directory, DIR_MODE)
                io.fsync_dir(os.path.dirname(directory))
        except OSError as error:
            raise argument_refusal("cannot_create_data_dir", path=directory, error=error.strerror) from None
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
            raise io_failure("bootstrap", error, root) from None
        layout.classify(io, root)  # re-inspect: the published tree must classify cleanly
        return store_id
    finally:
        lock.release()


def _bootstrap(io: RealIO, root: str, store_id: bytes) -> None:
    segments = os.path.join(root, layout.SEGMENTS_DIR)
    io.mkdir(segments, DIR_MODE)
    io.fsync_dir(root)
    publish_staged(io, segments, staging_file_name(1, os.urandom(16)),
                   segment_file_name(1), encode_header(1, 1, store_id))
    fsync_file(io, os.path.join(segments, segment_file_name(1)))
    io.fsync_dir(segments)
    publish_staged(io, root, store_staging_name(os.urandom(16)),
                   layout.STORE_NAME, encode_store_marker(store_id))
    ledger = LedgerWriter.open(io, root, store_id)  # only once STORE exists (upstream rule)
    try:
        ledger.record(1, 1)
    finally:
        ledger.close()

"""The v1 data directory: names, classification (storage.md §2.1) and the owner lock (§2.9).

``classify(io, data_dir)`` lists the root and ``segments/`` within an entry budget and
returns an ``Inventory`` or raises ``RecoveryRefused`` (kind ``discovery`` for names and
file types, ``resource_limit`` for the budget). ``acquire_lock`` walks the absolute path
with ``O_NOFOLLOW`` and takes ``flock(LOCK_EX|LOCK_NB)`` on ``.tay-owner.lock``.
"""

from __future__ import annotations

import errno
import os
import stat

from tay._frozen import LazyPattern, Record
from tay.failures import RecoveryRefused
from tay.storage.fsio import OPEN_NOFOLLOW, RealIO
from tay.storage.formats.segment import (
    HEADER_SIZE,
    parse_segment_file_name,
    parse_staging_file_name,
    segment_file_name,
)
from tay.storage.formats.segment_ledger import LEDGER_FILE_NAME
from tay.storage.formats.store_marker import (
    STORE_FILE_NAME,
    STORE_SIZE,
    parse_store_staging_name,
    store_staging_name,
)

# The file names themselves are defined once, next to their formats: segment names in
# ``tay.storage.formats.segment``, STORE names in ``tay.storage.formats.store_marker``.
LOCK_NAME = ".tay-owner.lock"
STORE_NAME = STORE_FILE_NAME
LEDGER_NAME = LEDGER_FILE_NAME
SEGMENTS_DIR = "segments"
# a rolled-back or interrupted first adoption leaves ``epochs/`` (published or candidate
# epochs that no CURRENT names): a v1 root tolerates it and never reads inside it
EPOCHS_DIR = "epochs"
V2_MARKERS = ("STORE-V2", "CURRENT")
STORE_STAGING_CAP = STORE_SIZE
SEGMENT_STAGING_CAP = HEADER_SIZE
ADOPTION_STAGING_CAP = 76  # the largest object an adoption stages (CURRENT)
DEFAULT_MAX_DIRECTORY_ENTRIES = 100_000
_ADOPTION_STAGING = LazyPattern(r"\.tay-(v2-marker|adoption|current)-[0-9a-f]{32}\.tmp")


class Inventory(Record):
    """One classified listing of a data directory."""

    __slots__ = ("root", "has_store", "has_lock", "has_segments_dir", "has_ledger", "segment_ids",
                 "staging", "unrelated", "total_segment_bytes", "fingerprint", "segments_dir")
    root: str
    has_store: bool
    has_lock: bool
    has_segments_dir: bool
    has_ledger: bool  # SEGMENT-LEDGER (tay's own; upstream sees an unrelated file)
    segment_ids: list[int]
    staging: list[str]
    unrelated: list[str]
    total_segment_bytes: int
    # (relative path, inode, size) of every entry: "the re-list must be unchanged"
    fingerprint: tuple[tuple[str, int, int], ...]
    # where the segment files are: ``segments`` (None), or ``epochs/legacy-<nonce>`` when
    # an interrupted first adoption is read without rolling it back (inspect)
    segments_dir: str | None

    def __init__(self, root: str, has_store: bool = False, has_lock: bool = False,
                 has_segments_dir: bool = False, has_ledger: bool = False,
                 segment_ids: list[int] | None = None, staging: list[str] | None = None,
                 unrelated: list[str] | None = None, total_segment_bytes: int = 0,
                 fingerprint: tuple[tuple[str, int, int], ...] = (),
                 segments_dir: str | None = None) -> None:
        self.root = root
        self.has_store = has_store
        self.has_lock = has_lock
        self.has_segments_dir = has_segments_dir
        self.has_ledger = has_ledger
        self.segment_ids = [] if segment_ids is None else segment_ids  # new lists for each
        self.staging = [] if staging is None else staging
        self.unrelated = [] if unrelated is None else unrelated
        self.total_segment_bytes = total_segment_bytes
        self.fingerprint = fingerprint
        self.segments_dir = segments_dir

    @property
    def segments_path(self) -> str:
        return os.path.join(self.root, self.segments_dir or SEGMENTS_DIR)

    def segment_path(self, segment_id: int) -> str:
        return os.path.join(self.segments_path, segment_file_name(segment_id))


def _refuse(reason: str, path: str, kind: str = "discovery", **extra: object) -> RecoveryRefused:
    return RecoveryRefused(kind, reason, path=path, stage="preflight", **extra)


def _check_utf8(name: str, path: str) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("invalid_utf8_name", path) from None


def _classify_entry(name: str, path: str, info: os.stat_result, in_segments: bool) -> str:
    """Return the entry's role, or raise the §2.1 refusal for it."""
    _check_utf8(name, path)
    if stat.S_ISLNK(info.st_mode):
        raise _refuse("symlink", path)
    is_dir = stat.S_ISDIR(info.st_mode)
    is_reg = stat.S_ISREG(info.st_mode)
    if not (is_dir or is_reg):
        raise _refuse("unsupported_file_type", path)
    if is_reg and info.st_nlink != 1:
        raise _refuse("hard_link", path, links=info.st_nlink)
    role = _name_role(name, in_segments)
    if role == "epochs_dir" and is_dir:
        return role
    if role == "segments_dir":
        if not is_dir:
            raise _refuse("segments_not_directory", path)
        return role
    if is_dir:
        raise _refuse("unexpected_directory", path)
    if role in ("store", "canonical") and info.st_size == 0:
        raise _refuse("zero_byte_canonical", path)
    if role in ("store_staging", "segment_staging", "adoption_staging"):
        cap = {"store_staging": STORE_STAGING_CAP, "segment_staging": SEGMENT_STAGING_CAP,
               "adoption_staging": ADOPTION_STAGING_CAP}[role]
        if info.st_size > cap:
            raise _refuse("oversized_staging", path, size=info.st_size, cap=cap)
    if role == "malformed":
        raise _refuse("malformed_segment_name", path)
    return role


def _name_role(name: str, in_segments: bool) -> str:
    if in_segments:
        if parse_segment_file_name(name) is not None:
            return "canonical"
        if parse_staging_file_name(name) is not None:
            return "segment_staging"
    else:
        if name == LOCK_NAME:
            return "lock"
        if name == STORE_NAME:
            return "store"
        if name == LEDGER_NAME:
            return "ledger"
        if name == SEGMENTS_DIR:
            return "segments_dir"
        if name == EPOCHS_DIR:
            return "epochs_dir"
        if name in V2_MARKERS:
            return "v2_marker"
        if parse_store_staging_name(name) is not None:
            return "store_staging"
        if _ADOPTION_STAGING.fullmatch(name):
            # an adoption killed before it published ADOPTION leaves its staging file in a
            # v1 root; tolerated (the next compaction removes it), never read
            return "adoption_staging"
    if ".tay" in name.lower():
        return "malformed"
    return "unrelated"


def _list(io: RealIO, path: str, budget: list[int]) -> list[str]:
    try:
        names = sorted(io.listdir(path))
    except OSError as error:
        raise RecoveryRefused("io", error.strerror or "listdir", path=path, stage="preflight") from None
    budget[0] -= len(names)
    if budget[0] < 0:
        raise _refuse("max_directory_entries", path, kind="resource_limit")
    return names


def classify(io: RealIO, data_dir: str, max_entries: int = DEFAULT_MAX_DIRECTORY_ENTRIES,
             *, legacy: str | None = None) -> Inventory:
    """List and classify ``data_dir`` (§2.1); IDs must be exactly 1..n.

    ``legacy`` (``epochs/legacy-<nonce>``): read an interrupted first adoption as the v1
    store its rollback gives back, without moving anything: the segments are listed there
    and the adoption's own root files (ADOPTION, STORE-V2, their staging) are allowed.
    """
    root = os.path.abspath(data_dir)
    inventory = Inventory(root=root)
    budget = [max_entries]
    prints: list[tuple[str, int, int]] = []
    root_names = _list(io, root, budget)
    if legacy is None and any(marker in root_names for marker in V2_MARKERS):
        raise _refuse("store_v2_root", root, kind="unsupported_physical")
    if legacy is not None:
        if "CURRENT" in root_names or "ADOPTION" not in root_names:
            raise _refuse("adoption_state_changed", root, kind="changed_view")
        if SEGMENTS_DIR not in root_names:  # moved aside already: read them there
            inventory.segments_dir = legacy
            inventory.has_segments_dir = True
        root_names = [n for n in root_names if n not in ("ADOPTION", "STORE-V2")
                      and not _ADOPTION_STAGING.fullmatch(n)]
    for name in root_names:
        path = os.path.join(root, name)
        info = io.lstat(path)
        role = _classify_entry(name, path, info, in_segments=False)
        prints.append((name, info.st_ino, info.st_size))
        if role == "lock":
            inventory.has_lock = True
        elif role == "store":
            inventory.has_store = True
        elif role == "segments_dir":
            inventory.has_segments_dir = True
        elif role == "epochs_dir":
            pass  # v2 leftovers, never read by a v1 recovery
        elif role == "ledger":
            inventory.has_ledger = True
        elif role in ("store_staging", "adoption_staging"):
            inventory.staging.append(name)
        else:
            inventory.unrelated.append(name)
    if inventory.has_segments_dir:
        _classify_segments(io, inventory, budget, prints)
    inventory.fingerprint = tuple(prints)
    return inventory


def _classify_segments(
    io: RealIO, inventory: Inventory, budget: list[int], prints: list[tuple[str, int, int]]
) -> None:
    directory = inventory.segments_path
    prefix = inventory.segments_dir or SEGMENTS_DIR
    for name in _list(io, directory, budget):
        path = os.path.join(directory, name)
        info = io.lstat(path)
        role = _classify_entry(name, path, info, in_segments=True)
        prints.append((f"{prefix}/{name}", info.st_ino, info.st_size))
        if role == "canonical":
            inventory.segment_ids.append(int(name[:20]))  # a canonical name is its ID
            inventory.total_segment_bytes += info.st_size
        elif role == "segment_staging":
            inventory.staging.append(f"{prefix}/{name}")
        else:
            inventory.unrelated.append(f"{prefix}/{name}")
    inventory.segment_ids.sort()
    for expected, segment_id in enumerate(inventory.segment_ids, start=1):
        if segment_id != expected:
            raise RecoveryRefused(
                "continuity",
                "segment_id_gap",
                path=inventory.segment_path(segment_id),
                segment_id=segment_id,
                stage="preflight",
                expected_segment_id=expected,
            )


class StoreLock(Record):
    """The held owner lock; closing the descriptor releases it."""

    __slots__ = ("io", "fd", "path", "created")
    io: RealIO
    fd: int
    path: str
    created: bool

    def __init__(self, io: RealIO, fd: int, path: str, created: bool) -> None:
        self.io = io
        self.fd = fd
        self.path = path
        self.created = created

    def release(self) -> None:
        if self.fd >= 0:
            self.io.close(self.fd)
            self.fd = -1


def walk_no_follow(path: str) -> list[str]:
    """Open every directory of absolute ``path`` from ``/`` with O_NOFOLLOW; return them.

    Raises ``FileNotFoundError``/``NotADirectoryError``/``OSError(ELOOP)`` as ``openat`` does.
    """
    ancestors = ["/"]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        current = "/"
        for part in [p for p in path.split("/") if p]:
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | OPEN_NOFOLLOW, dir_fd=fd)
            except OSError as error:
                if os.path.islink(os.path.join(current, part)):
                    raise OSError(errno.ELOOP, "symlink in path", os.path.join(current, part)) from None
                raise error
            os.close(fd)
            fd = child
            current = os.path.join(current, part)
            ancestors.append(current)
    finally:
        os.close(fd)
    return ancestors


def probe_noreplace_rename(io: RealIO, directory: str) -> None:
    """Prove once that ``directory`` supports no-replace rename (§2.9 lock step 4).

    Two empty STORE staging files are created and the first is renamed onto the second:
    the rename must fail with EEXIST. ENOSYS/EINVAL (no renameat2 here) and a rename that
    replaced its target are refused before anything is published. Both probe files are
    removed again; a crash in between leaves empty staging files, which recovery tolerates.
    """
    source, target = (store_staging_name(os.urandom(16)) for _ in range(2))
    created: list[str] = []
    try:
        for name in (source, target):
            io.close(io.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            created.append(name)
        try:
            io.rename_noreplace(directory, source, target)
        except OSError as error:
            if error.errno == errno.EEXIST:
                return
            reason = ("rename_noreplace_unsupported" if error.errno in (errno.ENOSYS, errno.EINVAL)
                      else "rename_noreplace_probe_failed")
            raise RecoveryRefused("unsupported_physical", reason, path=directory, stage="ownership",
                                  errno=error.errno, error=os.strerror(error.errno or 0)) from None
        created.remove(source)  # the source is gone: the rename replaced the target
        raise RecoveryRefused("unsupported_physical", "rename_noreplace_replaced_target",
                              path=directory, stage="ownership")
    finally:
        for name in created:
            try:
                io.unlink(os.path.join(directory, name))
            except OSError:
                pass


def acquire_lock(io: RealIO, data_dir: str, *, create: bool, fsync_ancestors: bool) -> StoreLock:
    """Take the store's owner lock (§2.9). ``create=False`` is recovery's existing-only mode.

    Raises ``RecoveryRefused`` with kind ``ownership_unavailable`` (missing root or lock,
    symlinked path, unusable lock file) or ``ownership_busy`` (another holder). A creating
    acquisition (bootstrap) also probes no-replace rename; recovery creates nothing here and
    the journal probes when the session is promoted to writing (``Journal.open``).
    """
    root = os.path.abspath(data_dir)
    lock_path = os.path.join(root, LOCK_NAME)
    try:
        ancestors = walk_no_follow(root)
    except OSError as error:
        reason = "symlink_in_path" if error.errno == errno.ELOOP else "missing_root"
        raise RecoveryRefused("ownership_unavailable", reason, path=root, stage="ownership") from None
    created = False
    try:
        if create:
            try:
                fd = io.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                created = True
            except FileExistsError:
                fd = io.open(lock_path, os.O_RDWR)
        else:
            fd = io.open(lock_path, os.O_RDWR)
    except OSError as error:
        reason = "missing_lock" if error.errno == errno.ENOENT else f"lock_open_{errno.errorcode.get(error.errno, error.errno)}"
        raise RecoveryRefused("ownership_unavailable", reason, path=lock_path, stage="ownership") from None
    info = io.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        io.close(fd)
        raise RecoveryRefused("ownership_unavailable", "lock_not_single_link_regular", path=lock_path, stage="ownership")
    if not io.flock_exclusive(fd):
        io.close(fd)
        raise RecoveryRefused("ownership_busy", "store_busy", path=lock_path, stage="ownership")
    if create:
        try:
            probe_noreplace_rename(io, root)
        except BaseException:
            io.close(fd)
            raise
    if fsync_ancestors:
        for directory in ancestors:
            io.fsync_dir(directory)
        if created:
            io.fsync(fd)
            io.fsync_dir(root)
    return StoreLock(io=io, fd=fd, path=lock_path, created=created)

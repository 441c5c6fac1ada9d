"""``tay storage repair``: remove an incomplete final record of the highest segment, and
nothing else.

The seeds forbid automatic torn-tail repair, so recovery only refuses a torn tail; this is
the explicit, offline step an operator runs after reading that refusal. It changes bytes
only when all of this holds, checked under the owner lock before anything is written:

1. the store's physical pass (recovery's preflight; for a Store-v2 root, of the epoch
   CURRENT names) refuses with an incomplete final object of the highest segment
   (``recover.TORN_TAIL_REASONS``: a torn record, 1-3 bytes of a magic, or a torn footer);
2. the same pass over the store *as it would be without those bytes* succeeds: every
   earlier segment, the topology and the segment ledger are sound;
3. the segment file is still the inode and size that pass scanned.

Then it copies the removed bytes into a new side file in the data directory
(``torn-tail-<segment id>-at-<offset>-<UTC time>.bin``, mode 0600, fsynced with the root),
truncates the segment at the torn object's start, fsyncs it, and runs the physical pass
again. The removed bytes were never acknowledged: the writer acknowledges a batch only
after every byte of it is written and synced. Everything else (a CRC mismatch of a complete
record, damage before the tail, a torn tail in a sealed segment, a missing segment) is
refused with nothing changed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tay.failures import RecoveryRefused, StorageFailure
from tay.storage import layout
from tay.storage.fsio import FILE_MODE, RealIO
from tay.storage.recovery import adoption
from tay.storage.recovery.limits import RecoveryOptions
from tay.storage.recovery.physical import is_torn_tail
from tay.storage.recovery.recover import preflight

SIDE_FILE_PREFIX = "torn-tail-"  # never contains ".tay": upstream readers ignore it


@dataclass
class RepairOutcome:
    """What ``repair_store`` did (``repaired`` False: the store needed nothing)."""

    data_dir: str
    repaired: bool
    finding: dict[str, Any] = field(default_factory=dict)
    segment_path: str | None = None
    offset: int | None = None
    removed_bytes: int = 0
    side_file: str | None = None
    next_sequence: int | None = None

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True, "repaired": self.repaired, "data_dir": self.data_dir,
                               "next_sequence": self.next_sequence}
        if self.repaired:
            out.update(finding=self.finding, path=self.segment_path, offset=self.offset,
                       removed_bytes=self.removed_bytes, side_file=self.side_file)
        return out


def refused(why: str, finding: StorageFailure | None, root: str, **extra: Any) -> RecoveryRefused:
    """The repair's own refusal: ``why`` it will not act, and the store's finding."""
    found = finding.report() if finding is not None else {}
    return RecoveryRefused("repair_refused", why, path=found.get("path", root), stage="repair",
                           offset=found.get("offset"), finding=found, changed="nothing",
                           **extra)


def side_file_name(segment_id: int, offset: int, now: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{SIDE_FILE_PREFIX}{segment_id:020d}-at-{offset}-{stamp}.bin"


def repair_store(data_dir: str, *, io: RealIO | None = None,
                 options: RecoveryOptions | None = None) -> RepairOutcome:
    """Repair ``data_dir`` as the module docstring says, or raise ``RecoveryRefused``
    (kind ``repair_refused`` with the store's ``finding``, or an ownership refusal).

    A v1 store's highest segment and a Store-v2 store's selected epoch tail are handled
    alike; an interrupted first adoption is refused (starting the store rolls it back)."""
    io = io or RealIO()
    options = options or RecoveryOptions()
    options.validate()
    root = os.path.abspath(data_dir)
    lock = layout.acquire_lock(io, root, create=False, fsync_ancestors=False)
    try:
        shape = adoption.root_shape(io, root)
        if shape == "adoption":
            raise refused("interrupted_adoption", None, root,
                          remedy="start the store once (tay serve rolls the adoption back "
                                 "before it reads the store), then repair what it refuses")
        physical = _physical_pass(shape)
        try:
            view = physical(io, root, options, keep_mappings=False)
        except RecoveryRefused as finding:
            return _repair_torn_tail(io, root, options, finding, physical)
        return RepairOutcome(root, repaired=False, next_sequence=view.next_sequence)
    finally:
        lock.release()


def _physical_pass(shape: str) -> Callable[..., Any]:
    """Recovery's pass 1 for this root: ``preflight`` (v1) or ``preflight_v2`` (Store v2)."""
    if shape == "v2":
        from tay.storage.recovery.store_v2 import preflight_v2

        return preflight_v2
    return preflight


def _repair_torn_tail(io: RealIO, root: str, options: RecoveryOptions,
                      finding: RecoveryRefused, physical: Callable[..., Any]) -> RepairOutcome:
    if finding.kind == "continuity" and finding.reason == "sealed_history_error":
        raise refused("sealed_segment", finding, root)
    if not is_torn_tail(finding) or finding.path is None or finding.offset is None:
        raise refused("not_a_torn_tail", finding, root)
    path, offset = finding.path, finding.offset
    try:
        seen = io.lstat(path)
    except OSError:
        raise refused("store_changed", finding, root) from None
    try:  # the store as it would be without the torn bytes must pass the physical checks
        cut_view = physical(io, root, options, keep_mappings=False, highest_length=offset)
    except RecoveryRefused as remainder:
        raise refused("damage_beyond_the_tail", remainder, root, tail=finding.report()) from None
    highest = cut_view.segments[-1]
    if highest.path != path:
        raise refused("not_the_highest_segment", finding, root)
    side: str | None = None
    try:
        fd = io.open(path, os.O_RDWR)
        try:
            info = io.fstat(fd)
            if (info.st_ino, info.st_size) != (seen.st_ino, seen.st_size) or \
                    info.st_size <= offset:
                raise refused("store_changed", finding, root)
            torn = io.read_at(fd, info.st_size - offset, offset)
            name = side_file_name(highest.segment_id, offset, time.time())
            side = _save_side_file(io, root, name, torn)
            io.truncate(fd, offset)
            io.fsync(fd)
        finally:
            io.close(fd)
    except OSError as error:
        raise RecoveryRefused("io", "repair_failed", path=error.filename or path, stage="repair",
                              errno=error.errno, error=os.strerror(error.errno or 0),
                              side_file=side, finding=finding.report()) from None
    after = physical(io, root, options, keep_mappings=False)
    return RepairOutcome(root, repaired=True, finding=finding.report(), segment_path=path,
                         offset=offset, removed_bytes=len(torn), side_file=side,
                         next_sequence=after.next_sequence)


def _save_side_file(io: RealIO, root: str, name: str, data: bytes) -> str:
    """Create ``root/name`` (O_EXCL, 0600) holding ``data``, durable before any cut."""
    path = os.path.join(root, name)
    fd = io.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        io.write_all_at(fd, data, 0)
        io.fsync(fd)
    finally:
        io.close(fd)
    io.fsync_dir(root)
    return path

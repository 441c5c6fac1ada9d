"""Steps 7-11 of a compaction (storage.md §3.8): publish the epoch, adopt, switch CURRENT,
reclaim the predecessor.

* ``publish_epoch``: fsync the candidate's ``segments/`` and directory, no-replace rename
  to ``epochs/e-<hex>``, fsync ``epochs/``.
* ``adopt`` (first v1->v2 adoption only): ADOPTION (staged, fsynced, no-replace), the root
  ``segments/`` moved to ``epochs/legacy-<nonce>``, STORE-V2 (staged, no-replace).
* ``switch_current``: the point of no return. The first CURRENT is published with a
  no-replace rename; a later one replaces the old file after checking that it still holds
  the bytes (and inode) this compaction started from.
* ``reclaim_epoch`` / ``reclaim_legacy`` / ``reclaim_candidate``: best-effort removal of what
  no CURRENT names, each file unlinked and its directory fsynced in the §3.8 order; never
  the epoch CURRENT names.
"""

from __future__ import annotations

import errno
import os

from tay.failures import RecoveryRefused
from tay.storage.formats.segment import parse_segment_file_name, parse_staging_file_name
from tay.storage.fsio import FILE_MODE, RealIO
from tay.storage.journal.setup import publish_staged
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.markers import CURRENT_SIZE, decode_current, encode_adoption, encode_store_v2


def publish_epoch(io: RealIO, root: str, candidate_path: str, epoch_id: bytes) -> str:
    """Step 7: the candidate becomes ``epochs/e-<hex>``; returns its path."""
    epochs = os.path.join(root, v2_layout.EPOCHS_DIR)
    io.fsync_dir(os.path.join(candidate_path, v2_layout.SEGMENTS_DIR))
    io.fsync_dir(candidate_path)
    name = v2_layout.epoch_dir_name(epoch_id)
    io.move_noreplace(epochs, os.path.basename(candidate_path), epochs, name)
    io.fsync_dir(epochs)
    return os.path.join(epochs, name)


def adopt(io: RealIO, root: str, store_id: bytes) -> bytes:
    """Step 8 of the first adoption; returns the ADOPTION nonce (names the legacy dir)."""
    nonce = os.urandom(16)
    publish_staged(io, root, v2_layout.root_staging_name("adoption", os.urandom(16)),
                   v2_layout.ADOPTION_NAME, encode_adoption(nonce))
    epochs = os.path.join(root, v2_layout.EPOCHS_DIR)
    io.move_noreplace(root, "segments", epochs, v2_layout.legacy_dir_name(nonce))
    io.fsync_dir(root)
    io.fsync_dir(epochs)
    publish_staged(io, root, v2_layout.root_staging_name("v2-marker", os.urandom(16)),
                   v2_layout.STORE_V2_NAME, encode_store_v2(store_id))
    return nonce


def read_current(io: RealIO, root: str) -> bytes | None:
    path = os.path.join(root, v2_layout.CURRENT_NAME)
    try:
        fd = io.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return io.read_at(fd, CURRENT_SIZE + 1, 0)
    finally:
        io.close(fd)


def switch_current(io: RealIO, root: str, new: bytes, previous: bytes | None) -> None:
    """Step 9: publish ``new`` as CURRENT. ``previous`` None: the first CURRENT."""
    staging = v2_layout.root_staging_name("current", os.urandom(16))
    if previous is None:
        publish_staged(io, root, staging, v2_layout.CURRENT_NAME, new)
    else:
        path = os.path.join(root, v2_layout.CURRENT_NAME)
        before = io.lstat(path)
        if read_current(io, root) != previous:
            raise RecoveryRefused("changed_view", "authority_changed", path=path,
                                  stage="publication")
        fd = io.open(os.path.join(root, staging), os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            io.write_all_at(fd, new, 0)
            if io.fstat(fd).st_size != len(new):
                raise OSError(errno.EIO, "staged CURRENT size mismatch", staging)
            io.fsync(fd)
        finally:
            io.close(fd)
        after = io.lstat(path)
        if (after.st_ino, after.st_dev) != (before.st_ino, before.st_dev):
            raise RecoveryRefused("changed_view", "authority_changed", path=path,
                                  stage="publication")
        io.rename_replace(root, staging, v2_layout.CURRENT_NAME)
        io.fsync_dir(root)
    if read_current(io, root) != new:
        raise OSError(errno.EIO, "CURRENT does not read back as published",
                      os.path.join(root, v2_layout.CURRENT_NAME))


def _unlink_synced(io: RealIO, directory: str, name: str) -> None:
    io.unlink(os.path.join(directory, name))
    io.fsync_dir(directory)


def _check_current(io: RealIO, root: str, expected_current: bytes, target_epoch: bytes | None) -> None:
    """§3.8 step 11 preconditions: CURRENT is what we published, and not the target."""
    on_disk = read_current(io, root)
    if on_disk != expected_current:
        raise RecoveryRefused("changed_view", "authority_changed", stage="reclaim",
                              path=os.path.join(root, v2_layout.CURRENT_NAME))
    if target_epoch is not None and decode_current(on_disk).epoch_id == target_epoch:
        raise RecoveryRefused("argument", "reclaim_of_current_epoch", stage="reclaim",
                              epoch_id=target_epoch.hex())


def reclaim_epoch(io: RealIO, root: str, epoch_id: bytes, expected_current: bytes) -> None:
    """Remove ``epochs/e-<hex>`` (never the one CURRENT names); resumable after a crash."""
    _check_current(io, root, expected_current, epoch_id)
    path = os.path.join(root, v2_layout.EPOCHS_DIR, v2_layout.epoch_dir_name(epoch_id))
    _remove_epoch_dir(io, path, require_manifest=True)


def reclaim_unselected_epoch(io: RealIO, root: str, epoch_id: bytes,
                             selected: bytes | None) -> None:
    """Remove a published epoch no CURRENT names (``selected``: the one CURRENT names, None
    in a v1 root): one published before a crash that preceded its switch, or a
    predecessor whose reclaim was interrupted."""
    if epoch_id == selected:
        raise RecoveryRefused("argument", "reclaim_of_current_epoch", stage="reclaim",
                              epoch_id=epoch_id.hex())
    path = os.path.join(root, v2_layout.EPOCHS_DIR, v2_layout.epoch_dir_name(epoch_id))
    _remove_epoch_dir(io, path, require_manifest=True)


def reclaim_candidate(io: RealIO, root: str, nonce: bytes) -> None:
    """Remove a leaked, never published candidate (no CURRENT can name it)."""
    path = os.path.join(root, v2_layout.EPOCHS_DIR, v2_layout.candidate_dir_name(nonce))
    _remove_epoch_dir(io, path, require_manifest=False)


def _remove_epoch_dir(io: RealIO, path: str, require_manifest: bool) -> None:
    if not os.path.lexists(path):
        return
    segments = os.path.join(path, v2_layout.SEGMENTS_DIR)
    names = io.listdir(path)
    if set(names) - {v2_layout.SEGMENTS_DIR, v2_layout.MANIFEST_NAME}:
        raise RecoveryRefused("discovery", "reclaim_unexpected_entry", path=path,
                              stage="reclaim", found=sorted(names)[:8])
    if require_manifest and v2_layout.SEGMENTS_DIR in names and \
            v2_layout.MANIFEST_NAME not in names:
        raise RecoveryRefused("discovery", "reclaim_without_manifest", path=path,
                              stage="reclaim")
    if v2_layout.SEGMENTS_DIR in names:
        _empty_segments_dir(io, segments, path)
    if v2_layout.MANIFEST_NAME in names:
        _unlink_synced(io, path, v2_layout.MANIFEST_NAME)
    io.rmdir(path)
    io.fsync_dir(os.path.dirname(path))


def _empty_segments_dir(io: RealIO, directory: str, parent: str) -> None:
    """Pre-check, unlink each file (fsyncing the directory after each), remove the
    directory and fsync its parent."""
    files = io.listdir(directory)
    _precheck_files(io, directory, files)
    for name in sorted(files):
        _unlink_synced(io, directory, name)
    io.rmdir(directory)
    io.fsync_dir(parent)


def _precheck_files(io: RealIO, directory: str, names: list[str]) -> None:
    """Every entry is a canonical (or staging) single-link regular segment file."""
    import stat

    for name in names:
        info = io.lstat(os.path.join(directory, name))
        named = parse_segment_file_name(name) is not None or \
            parse_staging_file_name(name) is not None
        if not named or not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise RecoveryRefused("discovery", "reclaim_unexpected_entry",
                                  path=os.path.join(directory, name), stage="reclaim")


def reclaim_legacy(io: RealIO, root: str, nonce: bytes, expected_current: bytes,
                   adoption: bytes) -> None:
    """Remove ``epochs/legacy-<nonce>`` and then ADOPTION (first adoption finished)."""
    _check_current(io, root, expected_current, None)
    adoption_path = os.path.join(root, v2_layout.ADOPTION_NAME)
    fd = io.open(adoption_path, os.O_RDONLY)
    try:
        on_disk = io.read_at(fd, 29, 0)
    finally:
        io.close(fd)
    if on_disk != adoption:
        raise RecoveryRefused("changed_view", "adoption_changed", path=adoption_path,
                              stage="reclaim")
    epochs = os.path.join(root, v2_layout.EPOCHS_DIR)
    path = os.path.join(epochs, v2_layout.legacy_dir_name(nonce))
    if os.path.lexists(path):
        _empty_segments_dir(io, path, epochs)
    _unlink_synced(io, root, v2_layout.ADOPTION_NAME)

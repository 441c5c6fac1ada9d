"""Which kind of root a data directory is, and the rollback of an interrupted first
adoption (storage.md §3.7 step 2).

* CURRENT present: a Store-v2 root (any ADOPTION is the intent of a finished adoption
  whose legacy directory was not reclaimed yet).
* no CURRENT, ADOPTION present: the first v1->v2 adoption stopped before its CURRENT was
  published. The v1 store is still authoritative; ``roll_back`` moves
  ``epochs/legacy-<nonce>`` back to ``segments/`` (no-replace), unlinks STORE-V2 and the
  adoption's unpublished staging files, then ADOPTION, each step followed by the directory
  fsync, so a crash inside the rollback is rolled back again by the next start.
* no CURRENT, no ADOPTION, STORE-V2 present: refused (``incomplete_adoption_without_intent``).
* otherwise: a v1 root.
"""

from __future__ import annotations

import os

from tay._frozen import LazyPattern
from tay.failures import RecoveryRefused
from tay.storage.fsio import RealIO
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.markers import MARKER_SIZE, decode_adoption

_UNPUBLISHED = LazyPattern(r"\.tay-(v2-marker|adoption|current)-[0-9a-f]{32}\.tmp")


def root_shape(io: RealIO, root: str) -> str:
    """``"v1"``, ``"v2"`` or ``"adoption"`` (an interrupted first adoption)."""
    try:
        names = set(io.listdir(root))
    except OSError as error:
        raise RecoveryRefused("io", error.strerror or "listdir", path=root,
                              stage="preflight") from None
    if v2_layout.CURRENT_NAME in names:
        return "v2"
    if v2_layout.ADOPTION_NAME in names:
        return "adoption"
    if v2_layout.STORE_V2_NAME in names:
        raise RecoveryRefused("discovery", "incomplete_adoption_without_intent",
                              path=os.path.join(root, v2_layout.STORE_V2_NAME),
                              stage="preflight")
    return "v1"


def adoption_nonce(io: RealIO, root: str) -> bytes:
    path = os.path.join(root, v2_layout.ADOPTION_NAME)
    fd = io.open(path, os.O_RDONLY)
    try:
        raw = io.read_at(fd, MARKER_SIZE + 1, 0)
    finally:
        io.close(fd)
    try:
        return decode_adoption(raw)
    except RecoveryRefused as failure:
        raise RecoveryRefused(failure.kind, failure.reason, path=path, stage="preflight",
                              **failure.extra) from None


def legacy_dir(io: RealIO, root: str) -> str:
    """``epochs/legacy-<nonce>`` of the pending adoption (relative to the root)."""
    return os.path.join(v2_layout.EPOCHS_DIR,
                        v2_layout.legacy_dir_name(adoption_nonce(io, root)))


def roll_back(io: RealIO, root: str) -> None:
    """Undo an interrupted first adoption; the root is a v1 store afterwards."""
    nonce = adoption_nonce(io, root)
    epochs = os.path.join(root, v2_layout.EPOCHS_DIR)
    legacy = v2_layout.legacy_dir_name(nonce)
    names = set(io.listdir(root))
    legacy_present = os.path.isdir(os.path.join(epochs, legacy))
    segments_present = "segments" in names
    try:
        if legacy_present and segments_present:
            raise RecoveryRefused("discovery", "adoption_rollback_ambiguous", path=root,
                                  stage="preflight", legacy=legacy)
        if not legacy_present and not segments_present:
            raise RecoveryRefused("discovery", "adoption_rollback_missing_history",
                                  path=os.path.join(epochs, legacy), stage="preflight")
        if legacy_present:
            io.move_noreplace(epochs, legacy, root, "segments")
            io.fsync_dir(epochs)
            io.fsync_dir(root)
        for name in sorted(names):
            if name == v2_layout.STORE_V2_NAME or _UNPUBLISHED.fullmatch(name):
                io.unlink(os.path.join(root, name))
                io.fsync_dir(root)
        io.unlink(os.path.join(root, v2_layout.ADOPTION_NAME))
        io.fsync_dir(root)
    except OSError as error:
        raise RecoveryRefused("uncertain_activation", "adoption_rollback_failed",
                              path=error.filename or root, stage="preflight",
                              mutation="activation_uncertain", errno=error.errno) from None

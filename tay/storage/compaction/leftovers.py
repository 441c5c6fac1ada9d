"""What earlier compactions left behind, removed by the next one before it writes (§3.8).

A crash (or a failed reclaim) can leave, besides a leaked candidate:

* a published epoch ``e-<hex>`` that no CURRENT names: published before a crash that came
  before its CURRENT switch, or a predecessor whose reclaim was interrupted;
* after a finished first adoption, ``epochs/legacy-<nonce>`` and/or ADOPTION (its reclaim
  was interrupted; CURRENT is published, so the v1 history is no longer needed);
* unpublished root staging files (``.tay-current-``, ``.tay-v2-marker-``,
  ``.tay-adoption-``, ``.tay-store-`` ``<hex>.tmp``) of a process killed between staging a
  file and renaming it.

Each is removed under the owner lock, after recovery has settled which store is
authoritative, with the §3.8 step 11 order (files one by one, each followed by a directory
fsync) and never the epoch CURRENT names. The crash matrix (tests/crash) found each of them.
"""

from __future__ import annotations

import os
import re

from tay.storage.compaction import publish
from tay.storage.fsio import RealIO
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.markers import MARKER_SIZE, decode_adoption, decode_current

_ROOT_STAGING = re.compile(r"\.tay-(current|v2-marker|adoption|store)-[0-9a-f]{32}\.tmp")


def reclaim_leftovers(io: RealIO, root: str) -> list[str]:
    """Remove every leftover of ``root`` (see the module docstring); returns their names."""
    removed: list[str] = []
    current = publish.read_current(io, root)
    selected = decode_current(current).epoch_id if current is not None else None
    epochs = os.path.join(root, v2_layout.EPOCHS_DIR)
    names = sorted(io.listdir(epochs)) if os.path.isdir(epochs) else []
    for name in names:
        nonce = v2_layout.parse_candidate_dir_name(name)
        if nonce is not None:
            publish.reclaim_candidate(io, root, nonce)
            removed.append(f"{v2_layout.EPOCHS_DIR}/{name}")
            continue
        epoch = v2_layout.parse_epoch_dir_name(name)
        if epoch is not None and epoch != selected:
            publish.reclaim_unselected_epoch(io, root, epoch, selected)
            removed.append(f"{v2_layout.EPOCHS_DIR}/{name}")
    if current is not None and v2_layout.ADOPTION_NAME in io.listdir(root):
        adoption = _read_adoption(io, root)
        publish.reclaim_legacy(io, root, decode_adoption(adoption), current, adoption)
        removed.append(v2_layout.ADOPTION_NAME)
    for name in sorted(io.listdir(root)):
        if _ROOT_STAGING.fullmatch(name):
            io.unlink(os.path.join(root, name))
            io.fsync_dir(root)
            removed.append(name)
    return removed


def _read_adoption(io: RealIO, root: str) -> bytes:
    fd = io.open(os.path.join(root, v2_layout.ADOPTION_NAME), os.O_RDONLY)
    try:
        return io.read_at(fd, MARKER_SIZE + 1, 0)
    finally:
        io.close(fd)

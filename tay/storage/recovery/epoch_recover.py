"""The Store-v2 recovery pipeline: preflight, replay, revalidate, activate (§3.7).

Called by ``recover`` once it holds the lock and has seen a CURRENT. Activation runs the
barriers of §3.8 ("Activation also fsyncs STORE-V2, CURRENT, MANIFEST, the epoch directory
and epochs/") and opens the journal on the epoch's tail segments.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from tay.failures import RecoveryRefused, StorageFailure
from tay.storage import layout
from tay.storage.fsio import RealIO
from tay.storage.journal.setup import fsync_file
from tay.storage.journal.writer import Journal
from tay.storage.recovery.limits import RecoveryOptions, RecoveryTimer
from tay.storage.recovery.outcome import Recovered
from tay.storage.recovery.physical import naming_repair
from tay.storage.recovery.store_v2 import (
    EpochView, preflight_v2, replay_v2, revalidate_v2,
)
from tay.storage.v2 import layout as v2_layout


def recover_epoch(io: RealIO, root: str, lock: layout.StoreLock, consumer: Any,
                  options: RecoveryOptions, timer: RecoveryTimer, durability: str,
                  rotation_target: int, activate: bool) -> Any:
    view: EpochView | None = None
    try:
        try:
            view = preflight_v2(io, root, options, timer=timer)
        except RecoveryRefused as refusal:
            raise naming_repair(refusal, root) from None
        limits = getattr(consumer, "limits", options.event_limits)
        replayed, reducer = replay_v2(view, consumer, limits, timer)
        if activate:
            timer.open_window()
        tail = view.tail() if activate and not view.exhausted else None
        view.close()
        revalidate_v2(io, root, options, view, timer)
        if not activate:
            return Recovered(view, replayed, None, consumer, 2, reducer)
        if view.exhausted:
            raise RecoveryRefused("resource_limit", "store_exhausted", path=root,
                                  stage="activation")
        assert tail is not None
        journal = activate_epoch(io, root, lock, view, tail, durability, rotation_target,
                                 timer)
        return Recovered(view, replayed, journal, consumer, 2, reducer)
    except BaseException as error:
        drop_frames(error)
        raise
    finally:
        if view is not None:
            view.close()


def drop_frames(error: BaseException | None) -> None:
    """Clear the finished frames of a refusal on its way out (and of the failures it was
    raised from): a decoder's frame holds views of a segment's mapping, which cannot be
    closed while they live (``BufferError`` instead of the refusal)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


def activate_epoch(io: RealIO, root: str, lock: layout.StoreLock, view: EpochView, tail: Any,
                   durability: str, rotation_target: int,
                   timer: RecoveryTimer | None = None) -> Journal:
    """The activation barriers, then a journal appending to the epoch's tail."""
    if timer is not None:
        timer.start_activation()
    epoch_dir = view.epoch.path
    try:
        for directory in layout.walk_no_follow(root):
            io.fsync_dir(directory)
        io.fsync(lock.fd)
        for name in (v2_layout.STORE_V2_NAME, v2_layout.CURRENT_NAME):
            fsync_file(io, os.path.join(root, name))
        fsync_file(io, os.path.join(epoch_dir, v2_layout.MANIFEST_NAME))
        io.fsync_dir(epoch_dir)
        io.fsync_dir(os.path.join(root, v2_layout.EPOCHS_DIR))
        if timer is not None:
            timer.check("activation", path=epoch_dir)
    except OSError as error:
        raise RecoveryRefused("uncertain_activation", "barrier_failed",
                              path=error.filename or root, stage="activation",
                              mutation="activation_uncertain", errno=error.errno) from None
    try:
        return Journal.open(io, root, lock, tail, durability=durability,
                            rotation_target=rotation_target,
                            segments_dir=view.epoch.segments_path, epoch_id=view.epoch_id)
    except StorageFailure as failure:
        raise RecoveryRefused("uncertain_activation", failure.reason,
                              path=failure.path or root, stage="activation",
                              mutation="activation_uncertain") from None

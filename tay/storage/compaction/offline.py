"""Offline compaction (storage.md §3.8), the first v1->v2 adoption included.

``compact_offline(data_dir, consumer=...)`` owns the store for its whole run (the lock is
taken by recovery and kept): it recovers the source into ``consumer`` (the engine, which
holds every kind of durable state; for a v1 source through ``V1Translation``), seals the
source tail, inventories and hashes the sealed source files, plans the base (retention,
renormalized orders), admits the space, writes and verifies the candidate, publishes it,
adopts (v1) or re-checks CURRENT (v2), switches CURRENT, verifies the new store by a full
recovery and reclaims the predecessor.

Any failure before the CURRENT switch leaves the old store authoritative (a candidate may
leak; the next compaction removes it). After the switch the new epoch is authoritative; a
failed reclaim is left for later and reported.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tay.failures import RecoveryRefused, StorageFailure
from tay.storage.compaction import publish
from tay.storage.compaction.candidate import CandidateWriter
from tay.storage.compaction.leftovers import reclaim_leftovers
from tay.storage.compaction.plan import base_records, renormalize, retention_split
from tay.storage.compaction.space import admit_space, estimate_base_bytes
from tay.storage.compaction.translate import V1Translation
from tay.storage.compaction.verify import compare_jobs, mismatch, replay_candidate
from tay.storage.fsio import RealIO
from tay.storage.journal.rotation import DEFAULT_ROTATION_TARGET
from tay.storage.journal.setup import new_store_id
from tay.storage.recovery.recover import RecoveryOptions, recover
from tay.storage.recovery.store_v2 import file_sha256
from tay.storage.v2 import layout as v2_layout
from tay.storage.v2.manifest import Retention, durable_form  # noqa: F401 (re-exported)
from tay.storage.v2.markers import Current, encode_current

DEFAULT_RETENTION = Retention("hours", 24)


@dataclass
class CompactionResult:
    """What one compaction did (``tay storage compact --json`` prints it)."""

    epoch_id: bytes
    source_version: int
    adopted: bool
    captured_at: int
    retention: Retention
    retained_jobs: int
    expired_jobs: int
    base_segments: int
    base_bytes: int
    source_bytes: int
    reclaimed: bool
    reclaim_error: str | None = None
    timings_ms: dict[str, int] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        return {
            "epoch_id": self.epoch_id.hex(), "source_store_version": self.source_version,
            "adopted": self.adopted, "captured_at": self.captured_at,
            "terminal_retention": self.retention.to_value(),
            "retained_jobs": self.retained_jobs, "expired_jobs": self.expired_jobs,
            "base_segments": self.base_segments, "base_bytes": self.base_bytes,
            "source_bytes": self.source_bytes, "reclaimed": self.reclaimed,
            "reclaim_error": self.reclaim_error, "timings_ms": self.timings_ms,
        }


def _source_inventory(io: RealIO, segments_dir: str,
                      active_id: int) -> tuple[tuple[int, bytes], ...]:
    from tay.storage.formats.segment import segment_file_name

    out = []
    for segment_id in range(1, active_id):
        path = os.path.join(segments_dir, segment_file_name(segment_id))
        out.append((segment_id, file_sha256(io, path, io.lstat(path).st_size)))
    return tuple(out)


def compact_offline(data_dir: str, *, consumer: Any, retention: Retention | None = None,
                    now_ms: Callable[[], int] | None = None, io: RealIO | None = None,
                    durability: str = "sync", validated_filesystem: bool = False,
                    rotation_target: int = DEFAULT_ROTATION_TARGET,
                    options: RecoveryOptions | None = None,
                    max_candidate_bytes: int | None = None,
                    allow_small_rotation_target_for_tests: bool = False) -> CompactionResult:
    """Compact the store at ``data_dir``; ``consumer`` replays it and gives its state
    (``retained_jobs()``, ``checkpoints(captured_at)``, ``epoch_job``)."""
    io = io or RealIO()
    options = options or RecoveryOptions()
    clock = now_ms or (lambda: time.time_ns() // 1_000_000)
    timings: dict[str, int] = {}
    started = time.monotonic()

    def mark(step: str) -> None:
        timings[step] = round((time.monotonic() - started) * 1000)

    root = os.path.abspath(data_dir)
    translation = None
    from tay.storage.recovery.adoption import root_shape

    if root_shape(io, root) != "v2":
        translation = V1Translation(consumer)
    recovered = recover(root, consumer=translation or consumer, durability=durability,
                        validated_filesystem=validated_filesystem, rotation_target=rotation_target,
                        options=options, io=io,
                        allow_small_rotation_target_for_tests=allow_small_rotation_target_for_tests)
    journal = recovered.journal
    lock = journal.lock
    mark("recovered")
    try:
        source_version = recovered.store_version
        if source_version == 1 and translation is None:  # a rollback made it v1 again
            raise RecoveryRefused("changed_view", "store_shape_changed", path=root,
                                  stage="compaction")
        journal.rotate()  # step 1: seal the source tail
        segments_dir, active_id = journal.segments_dir, journal.segment_id
        frontier = journal.next_sequence - 1
        store_id = journal.store_id
        journal.close(release_lock=False)
        source_segments = _source_inventory(io, segments_dir, active_id)
        source_bytes = sum(io.lstat(os.path.join(segments_dir, n)).st_size
                           for n in io.listdir(segments_dir) if n.endswith(".tay"))
        mark("source_sealed")
        previous_current = publish.read_current(io, root)
        source_epoch = recovered.view.epoch_id if source_version == 2 else None
        durable = recovered.view.manifest.terminal_retention if source_version == 2 else None
        applied = retention if retention is not None else (durable or DEFAULT_RETENTION)
        state = translation or consumer
        captured_at = clock()
        kept, expired = retention_split(state.retained_jobs(), applied, captured_at)
        kept, _ = renormalize(kept)
        checkpoints = state.checkpoints(captured_at)
        # what earlier crashes left goes first: a leaked copy of the store must not make
        # the space admission refuse the compaction that would remove it
        reclaim_leftovers(io, root)  # candidates, unselected epochs, staging, a legacy dir
        admit_space(io, root, estimate_base_bytes(kept, checkpoints), len(source_segments),
                    max_candidate_bytes)
        mark("planned")
        writer = CandidateWriter(io, root, store_id, rotation_target)
        writer.create_directories()
        base = writer.write_base(base_records(kept, checkpoints))
        epoch_id = new_store_id()
        manifest, manifest_bytes = writer.write_manifest(
            epoch_id=epoch_id, captured_at=captured_at, retention=durable_form(applied),
            source_epoch_id=source_epoch, source_frontier=frontier,
            source_segments=source_segments)
        candidate = writer.create_tail(manifest, manifest_bytes)
        mark("candidate_written")
        table, _ = replay_candidate(io, candidate.path, store_id, options)
        compare_jobs(kept, table.jobs)
        if len(table.entities) != len(checkpoints):
            raise mismatch("entity_count", expected=len(checkpoints), found=len(table.entities))
        mark("candidate_verified")
        epoch_path = publish.publish_epoch(io, root, candidate.path, epoch_id)
        replay_candidate(io, epoch_path, store_id, options)  # step 7: again, once renamed
        adopted_nonce = None
        if source_version == 1:
            adopted_nonce = publish.adopt(io, root, store_id)
        elif publish.read_current(io, root) != previous_current:
            raise RecoveryRefused("changed_view", "authority_changed", path=root,
                                  stage="publication")
        new_current = encode_current(Current(store_id, epoch_id,
                                             hashlib.sha256(manifest_bytes).digest()))
        publish.switch_current(io, root, new_current, previous_current)
        mark("published")
    except BaseException:
        lock.release()
        raise
    try:
        _verify_published(io, root, lock, kept, options, consumer_limits=consumer.limits)
        mark("verified")
        result = CompactionResult(
            epoch_id=epoch_id, source_version=source_version, adopted=adopted_nonce is not None,
            captured_at=captured_at, retention=durable_form(applied), retained_jobs=len(kept),
            expired_jobs=len(expired), base_segments=len(base),
            base_bytes=sum(b.bytes for b in base), source_bytes=source_bytes, reclaimed=False,
            timings_ms=timings)
        try:
            if adopted_nonce is not None:
                adoption = os.path.join(root, v2_layout.ADOPTION_NAME)
                with open(adoption, "rb") as handle:
                    publish.reclaim_legacy(io, root, adopted_nonce, new_current, handle.read())
            else:
                publish.reclaim_epoch(io, root, source_epoch, new_current)
            result.reclaimed = True
        except (OSError, StorageFailure) as error:
            result.reclaim_error = str(error)
        mark("reclaimed")
        return result
    finally:
        lock.release()


def _verify_published(io: RealIO, root: str, lock: Any, kept: list, options: RecoveryOptions,
                      consumer_limits: Any) -> None:
    """Step 10: select the new epoch and run a full recovery; it must give the plan."""
    from tay.storage.compaction.verify import EpochTable

    table = EpochTable(consumer_limits)
    recover(root, consumer=table, io=io, options=options, activate=False, lock=lock)
    compare_jobs(kept, table.jobs)

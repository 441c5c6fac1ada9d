"""Verification of a compaction (storage.md §3.8 steps 6, 7 and 10): replay what was
written, independently of the writer, and compare it with the planned state.

``EpochTable`` is a reducer sink that keeps every job and every other entity's events;
``compare`` refuses (kind ``consumer_rejected``, reason ``verification_mismatch``) at the
first difference, so nothing is published from a candidate that does not replay to the plan.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.events.transitions import JobState
from tay.storage.formats.value import DecodeLimits
from tay.storage.fsio import RealIO
from tay.storage.recovery.limits import RecoveryOptions
from tay.storage.recovery.store_v2 import read_epoch_dir, replay_v2


class EpochTable:
    """A reducer sink: jobs by id, other entities' (revision, event) by entity."""

    def __init__(self, limits: DecodeLimits | None = None) -> None:
        self.limits = limits or DecodeLimits()
        self.jobs: dict[bytes, JobState] = {}
        self.entities: dict[tuple, tuple[int, ev.Event]] = {}

    def epoch_job(self, job_id: bytes) -> JobState | None:
        return self.jobs.get(job_id)

    def epoch_install(self, job: JobState, event: ev.Event | None = None) -> None:
        self.jobs[job.id] = job

    def epoch_entity(self, revision: int, event: ev.Event) -> None:
        carry = ev.epoch_carry(event.pair)
        self.entities[carry.entity(event.payload)] = (revision, event)


def job_fields(job: JobState) -> tuple:
    """Every durable field, with the definition compared by its canonical bytes."""
    return tuple(getattr(job, name) for name in JobState._fields if name != "definition")


def mismatch(what: str, **extra: Any) -> RecoveryRefused:
    return RecoveryRefused("consumer_rejected", "verification_mismatch", stage="verification",
                           what=what, **extra)


def compare_jobs(expected: Iterable[JobState], found: Mapping[bytes, JobState]) -> None:
    count = 0
    for job in expected:
        count += 1
        other = found.get(job.id)
        if other is None or job_fields(job) != job_fields(other):
            raise mismatch("job", job_id=job.id.hex())
    if count != len(found):
        raise mismatch("job_count", expected=count, found=len(found))


def replay_candidate(io: RealIO, path: str, store_id: bytes,
                     options: RecoveryOptions | None = None) -> tuple[EpochTable, Any]:
    """Read and replay one epoch directory with a fresh table; returns (table, view)."""
    options = options or RecoveryOptions()
    view = read_epoch_dir(io, path, store_id, options)
    try:
        table = EpochTable(options.event_limits)
        replay_v2(view, table, table.limits)
        return table, view
    finally:
        view.close()

"""Step 1 of a compaction (storage.md §3.8): what the new epoch's base holds.

* ``retention_split``: terminal jobs that expired at ``captured_at`` (§3.4: ``captured_at >=
  D`` and ``terminal_at <= captured_at - D``) are dropped, everything else is kept.
* ``renormalize``: offline, available jobs get orders 1..n sorted by (queue_key,
  eligible_at, old order, job_id); the online path keeps the orders it has.
* ``base_records``: the (7,1) snapshot of every kept job in ascending id, each followed by
  its (31,2) attachments, then the (30,2) checkpoints of the other entities.

Jobs here are ``JobState`` values in the logical domain (``tay.storage.v2.jobs``).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from tay._frozen import Frozen, set_field
from tay.storage import events as ev
from tay.storage.events.transitions import TERMINAL_STATES, JobState, _evolve, attachments
from tay.storage.v2.epoch_records import (
    EPOCH_EVENT_PAIR, JOB_ATTACHMENT_PAIR, encode_epoch_event, encode_job_attachment,
)
from tay.storage.v2.jobs import snapshot_of
from tay.storage.v2.manifest import Retention
from tay.storage.v2.records import SNAPSHOT_PAIR, encode_snapshot

BaseRecord = tuple[int, int, bytes]  # (type, schema, payload)


class Checkpoint(Frozen):
    """A non-job entity's state as the (30,2) event that recreates it at ``revision``."""

    __slots__ = ("event", "revision")
    event: ev.Event
    revision: int

    def __init__(self, event: ev.Event, revision: int) -> None:
        set_field(self, "event", event)
        set_field(self, "revision", revision)

    def sort_key(self) -> tuple:
        return (self.event.pair, repr(ev.epoch_carry(self.event.pair).entity(self.event.payload)))


def expires(job: JobState, retention: Retention, captured_at: int) -> bool:
    """§3.4: a terminal job expires at ``captured_at`` under ``retention``."""
    return (job.state in TERMINAL_STATES and job.terminal_at is not None
            and retention.expires(job.terminal_at, captured_at))


def as_started(job: JobState) -> JobState:
    """An executing job with a result or failure details recorded since its start (a
    success or worker failure a crash cut after those records, before its finish: the
    engine writes them first) as its start left it, the way the restart settles it: at
    its start's revision (an executing snapshot's execution is its revision, storage.md
    §3.5), the result dropped as the interrupted finish drops it, the details kept as the
    job's last failure."""
    return _evolve(job, revision=job.execution, result_present=False, result=None)


def retention_split(jobs: Iterable[JobState], retention: Retention,
                    captured_at: int) -> tuple[list[JobState], list[bytes]]:
    """(kept jobs in ascending id, expired job ids)."""
    kept: list[JobState] = []
    expired: list[bytes] = []
    for job in jobs:
        if expires(job, retention, captured_at):
            expired.append(job.id)
        elif job.state == "executing" and job.revision != job.execution:
            kept.append(as_started(job))
        else:
            kept.append(job)
    kept.sort(key=lambda job: job.id)
    return kept, expired


def renormalize(jobs: Sequence[JobState]) -> tuple[list[JobState], int]:
    """Offline orders: available jobs 1..n by (queue, eligible_at, old order, id).

    Returns the jobs (same order as given) and the allocator's next value.
    """
    available = sorted(
        (job for job in jobs if job.state == "available"),
        key=lambda job: (job.definition["queue_key"].encode("utf-8"), job.eligible_at,
                         job.ready_order or 0, job.id))
    orders = {job.id: index for index, job in enumerate(available, start=1)}
    out = [_evolve(job, ready_order=orders[job.id]) if job.id in orders
           else (job if job.ready_order is None else _evolve(job, ready_order=None))
           for job in jobs]
    return out, len(available) + 1


def base_records(jobs: Sequence[JobState],
                 checkpoints: Sequence[Checkpoint]) -> Iterator[BaseRecord]:
    """Every base record in order (jobs must already be in ascending id)."""
    for job in jobs:
        yield (*SNAPSHOT_PAIR, encode_snapshot(snapshot_of(job)))
        for event in attachments(job):
            yield (*JOB_ATTACHMENT_PAIR, encode_job_attachment(event))
    for checkpoint in sorted(checkpoints, key=Checkpoint.sort_key):
        yield (*EPOCH_EVENT_PAIR, encode_epoch_event(checkpoint.event, checkpoint.revision))

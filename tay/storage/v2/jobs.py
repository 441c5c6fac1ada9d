"""A job's durable state as a JOB_SNAPSHOT_V2 (7,1) and back.

Inside an epoch a ``JobState`` is in the logical domain (storage.md §3.6): ``revision``,
``cycle`` and ``execution`` are per-job logical revisions and ``ready_order`` is the job's
availability order (set only while it is ``available``). A snapshot holds exactly the
lifecycle fields; state it has no field for (a result) travels as (31,2) attachments.
"""

from __future__ import annotations

from tay.storage.events.definition import canonical_bytes
from tay.storage.events.transitions import JobState
from tay.storage.v2.records import Snapshot


def snapshot_of(job: JobState) -> Snapshot:
    """The (7,1) snapshot of a job in the logical domain (validated when encoded)."""
    available = job.state == "available"
    body = {
        "attempt": job.attempt,
        "attempted_at": job.attempted_at,
        "availability_order": job.ready_order if available else None,
        "completed_at": job.completed_at,
        "definition": job.definition,
        "diagnostic": dict(job.diagnostic) if job.diagnostic is not None else None,
        "eligible_at": job.eligible_at,
        "inserted_at": job.inserted_at,
        "next_attempt": job.next_attempt,
        "state": job.state,
        "terminal_at": job.terminal_at,
    }
    return Snapshot(job.id, job.revision, job.cycle, job.execution, body, job.definition_bytes)


def job_of(snapshot: Snapshot) -> JobState:
    """The job a validated snapshot describes (no attachments yet)."""
    body = snapshot.body
    definition = body["definition"]
    return JobState(
        id=snapshot.job_id, definition=definition,
        definition_bytes=snapshot.definition_bytes or canonical_bytes(definition),
        state=body["state"],
        revision=snapshot.revision, attempt=body["attempt"],
        next_attempt=body["next_attempt"], cycle=snapshot.cycle,
        execution=snapshot.execution, eligible_at=body["eligible_at"],
        ready_order=body["availability_order"], inserted_at=body["inserted_at"],
        attempted_at=body["attempted_at"], completed_at=body["completed_at"],
        terminal_at=body["terminal_at"], diagnostic=body["diagnostic"],
    )

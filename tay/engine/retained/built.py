"""Jobs held as rows or packed tuples, built into their JobStates many at once.

A restart holds most jobs unbuilt (rows read from the base or tail, packed tuples); what
needs their states (a compaction's capture, an operator's bulk action on a page of jobs)
builds them here: rows of one kind together (one decode and one reducer for a tail's
rows, one scan for a base's), since one at a time the calls around each decode cost more
than the decode.
"""

from __future__ import annotations

from typing import Any, Sequence

from tay.engine.retained.packed import job_state as packed_job_state
from tay.storage.events.transitions import JobState
from tay.storage.v2.rows import BaseLiveRow, JobRow, row_states
from tay.storage.v2.tail import (
    FailedRow, LiveRow, RetriedRow, ScheduledRow, TailRow, held_row_states, tail_job_states,
)


def captured_state(job: Any) -> JobState:
    """The JobState of one of ``captured_jobs``."""
    kind = type(job)
    if kind is JobState:
        return job
    if kind is tuple:
        return packed_job_state(job)
    return job.job_state()


def captured_states(jobs: Sequence[Any]) -> list[JobState]:
    """``captured_state`` of each of ``jobs``, in order. The jobs held as rows (most of a
    store's jobs after a restart) are built together, by kind: the tail's in one decode,
    the base's in one scan."""
    states: list[Any] = []
    groups: dict[Any, tuple[list[int], list[Any]]] = {}  # builder -> (where, rows)
    for job in jobs:
        build = _BUILT_TOGETHER.get(type(job))
        if build is None:
            states.append(captured_state(job))
        else:
            where, rows = groups.setdefault(build, ([], []))
            where.append(len(states))
            rows.append(job)
            states.append(None)
    for build, (where, rows) in groups.items():
        for k, state in zip(where, build(rows)):
            states[k] = state
    return states


# the rows built many at once: each kind's builder (kinds with one builder go together)
_BUILT_TOGETHER = {TailRow: tail_job_states, JobRow: row_states, BaseLiveRow: row_states,
                   LiveRow: held_row_states, ScheduledRow: held_row_states,
                   FailedRow: held_row_states, RetriedRow: held_row_states}

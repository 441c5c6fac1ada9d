"""The v1 -> v2 translation of a first adoption (storage.md §3.8 offline step 2).

A v1 history numbers a job's revision, cycle and execution with physical record sequences.
An epoch numbers them per job: every job event is one logical revision (insert = 1), the
cycle is the logical revision that started the cycle and the execution the one that started
the attempt. ``V1Translation`` wraps the replay consumer, watches each job event's effect
(the one transition function decides it, so the translation needs no rule of its own) and
keeps the logical numbers beside the replayed state; ``translate`` gives a job in the
logical domain. Availability orders are assigned afterwards (offline renormalization).
"""

from __future__ import annotations

from typing import Any

from tay.storage import events as ev
from tay.storage.events.transitions import JobState, _evolve


class V1Translation:
    """A replay consumer around ``inner`` (the engine or ``TableConsumer``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.limits = inner.limits
        self.logical: dict[bytes, tuple[int, int, int | None]] = {}

    def __call__(self, sequence: int, rtype: int, schema: int, payload: memoryview) -> None:
        from tay.storage.events import decode_event

        self.consume_event(sequence, decode_event(rtype, schema, payload, self.limits))

    def consume_event(self, sequence: int, event: ev.Event) -> Any:
        if not event.is_job_event:
            return self.inner.consume_event(sequence, event)
        job_id = event.payload["job_id"]
        before = self.inner.epoch_job(job_id)
        result = self.inner.consume_event(sequence, event)
        after = self.inner.epoch_job(job_id)
        revision, cycle, execution = self.logical.get(job_id, (0, 0, None))
        revision += 1
        if before is None or after.cycle != before.cycle:
            cycle = revision
        if after.execution is None:
            execution = None
        elif before is None or after.execution != before.execution:
            execution = revision
        self.logical[job_id] = (revision, cycle, execution)
        return result

    def translate(self, job: JobState) -> JobState:
        revision, cycle, execution = self.logical[job.id]
        return _evolve(job, revision=revision, cycle=cycle, execution=execution,
                       ready_order=job.ready_order)

    # the consumer's other faces pass through
    def epoch_job(self, job_id: bytes) -> JobState | None:
        return self.inner.epoch_job(job_id)

    def retained_jobs(self) -> list[JobState]:
        return [self.translate(job) for job in self.inner.retained_jobs()]

    def checkpoints(self, captured_at: int) -> list:
        return self.inner.checkpoints(captured_at)

"""Verification of a compaction (storage.md §3.8 steps 6, 7 and 10): replay what was
written, independently of the writer, and compare it with the planned state.

``EpochTable`` is a reducer sink that keeps every job and every other entity's events (an
offline compaction); ``PlannedTable`` compares each job with the plan as the replay
installs it and keeps none (an online one, while the server runs). Both refuse (kind
``consumer_rejected``, reason ``verification_mismatch``) at the first difference, so
nothing is published from a candidate that does not replay to the plan.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Callable, Iterable, Mapping, Sequence

from tay.failures import RecoveryRefused
from tay.storage import events as ev
from tay.storage.events.transitions import JobState, deletes
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
        if event is not None and deletes(event):
            del self.jobs[job.id]
        else:
            self.jobs[job.id] = job

    def epoch_entity(self, revision: int, event: ev.Event) -> None:
        carry = ev.epoch_carry(event.pair)
        self.entities[carry.entity(event.payload)] = (revision, event)


BUILD_CHUNK = 256  # planned jobs built at once (``states_of``), and held meanwhile


def one_at_a_time(state_of: Callable[[Any], JobState]) -> Callable[[Sequence[Any]],
                                                                     list[JobState]]:
    """A ``states_of`` that builds each job alone."""
    return lambda items: [state_of(item) for item in items]


def built(items: Sequence[Any], states_of: Callable[[Sequence[Any]], list[JobState]],
          chunk: int = BUILD_CHUNK) -> Iterable[JobState]:
    """Each of ``items`` built into its JobState, ``chunk`` at a time, in order."""
    for start in range(0, len(items), chunk):
        yield from states_of(items[start:start + chunk])


class PlannedTable:
    """The reducer sink of an online compaction's verification, which holds no retained job
    a second time: the replayed base's jobs (ascending id, as the base orders them) are
    compared with the plan's as they are installed and then dropped; once the base is
    complete (``end_base``), the catch-up looks a base job up by rebuilding the plan's
    (``state_of``: equal to the replayed one, field by field, or the replay was refused)
    and keeps only the jobs it changes.

    ``planned``: the kept jobs in ascending id, as whatever ``state_of`` builds a JobState
    from and ``id_of`` reads the id of (a JobState, a held row, a packed tuple). The base's
    are built ``BUILD_CHUNK`` at a time (``states_of``, default one at a time), as the
    replay comes to them."""

    def __init__(self, planned: Sequence[Any], state_of: Callable[[Any], JobState],
                 id_of: Callable[[Any], bytes], limits: DecodeLimits | None = None,
                 states_of: Callable[[Sequence[Any]], list[JobState]] | None = None) -> None:
        self.limits = limits or DecodeLimits()
        self.entities: dict[tuple, tuple[int, ev.Event]] = {}
        self._planned = planned
        self._state_of = state_of
        self._states_of = states_of or one_at_a_time(state_of)
        self._chunk: list[JobState] = []  # the planned jobs from _chunk_start, built
        self._chunk_start = 0
        self._ids = [id_of(job) for job in planned]
        self._compared = 0  # base jobs installed and found equal so far
        self._in_base = True
        # the catch-up's jobs, by id (None: deleted by it)
        self._changed: dict[bytes, JobState | None] = {}
        self._added = 0  # jobs the catch-up left retained less those the base holds

    def _base_index(self, job_id: bytes) -> int | None:
        ids = self._ids
        k = bisect_left(ids, job_id)
        return k if k < len(ids) and ids[k] == job_id else None

    def job(self, job_id: bytes) -> JobState | None:
        """The job's state as the replay has it (after ``end_base``)."""
        if job_id in self._changed:
            return self._changed[job_id]
        k = self._base_index(job_id)
        return None if k is None else self._state_of(self._planned[k])

    def _base_job(self, k: int) -> JobState:
        """The k-th planned job, built with the ``BUILD_CHUNK`` - 1 after it (the base comes
        in planned order); the chunk before is dropped."""
        offset = k - self._chunk_start
        if not 0 <= offset < len(self._chunk):
            self._chunk = []  # dropped before the next one is built
            self._chunk = self._states_of(self._planned[k:k + BUILD_CHUNK])
            self._chunk_start, offset = k, 0
        return self._chunk[offset]

    def count(self) -> int:
        return len(self._ids) + self._added

    def end_base(self) -> None:
        """The base replayed to the end: every planned job must have come."""
        if self._compared != len(self._ids):
            raise mismatch("job_count", expected=len(self._ids), found=self._compared)
        self._in_base = False

    # ---- the reducer's sink -----------------------------------------------------------

    def epoch_job(self, job_id: bytes) -> JobState | None:
        if self._in_base:
            raise mismatch("lookup_in_base", job_id=job_id.hex())
        return self.job(job_id)

    def epoch_install(self, job: JobState, event: ev.Event | None = None) -> None:
        if self._in_base:
            k = self._compared
            if k >= len(self._ids):
                raise mismatch("job_count", expected=len(self._ids), found=k + 1)
            if job.id != self._ids[k] or job_fields(job) != job_fields(self._base_job(k)):
                raise mismatch("job", job_id=job.id.hex())
            self._compared = k + 1
            if k + 1 == len(self._ids):
                self._chunk = []  # the last one compared: none is held on
            return
        changed = self._changed
        held = changed[job.id] is not None if job.id in changed \
            else self._base_index(job.id) is not None
        kept = event is None or not deletes(event)
        self._added += kept - held
        changed[job.id] = job if kept else None

    def epoch_entity(self, revision: int, event: ev.Event) -> None:
        carry = ev.epoch_carry(event.pair)
        self.entities[carry.entity(event.payload)] = (revision, event)


_DEFINITION = JobState._fields.index("definition")


def job_fields(job: JobState) -> tuple:
    """Every durable field, with the definition compared by its canonical bytes: the tuple
    without its definition, in two slices (a compaction compares every job it keeps)."""
    return job[:_DEFINITION] + job[_DEFINITION + 1:]


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

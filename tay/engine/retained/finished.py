"""Finished base jobs the engine has not touched since the restart, held in their columns.

A compacted base is mostly finished jobs that a restart only counts, charges and indexes.
The columnar replay hands them over a run at a time (``tay.storage.v2.rows.BaseJobs``);
the engine keeps each run as one copy of its bytes and its integer columns, and per job
only its id and admin-index stamp (``stamps``), instead of a ``JobRow`` and a
``LazyJobEntry`` each. Readers that only need what the columns hold (state, revision,
terminal time, keys, charge) read them in place; anything else takes the job out
(``EngineState._thaw``): it becomes the ``LazyJobEntry`` the row replay would have made, with
the same charge, stamp and counts, and from then on it is an ordinary job. Nothing here
changes state: the columns are only how untouched finished jobs are stored.

A running server also hands over the jobs it finished itself, each packed into one tuple
(tay.engine.retained.packed): ``packed`` holds them by id, read through ``PACKED`` where a run would
be, and ``stamps`` has their stamps too.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterator, Sequence

from tay.engine.admission import job_charge
from tay.engine.validation.options import DEFINITION_FIXED_NODES
from tay.engine.retained.packed import PACKED, PackedJobs
from tay.storage.v2.rows import BaseJobs, JobRow
from tay.storage.events.transitions import STATES
from tay._native import _pure_base as bj
from tay._native import _pure_snapshots as sr

_BJ = bj.BASE_JOB
assert sr.STATES == STATES  # a column's state index is the engine's queue-counts index


def charges(jobs: "BaseJobs | PackedJobs", k: Any) -> tuple[int, int]:
    """Job ``k``'s state-budget charge and the margin part of it (its result's size and its
    failure's details' charge), as the row install charges them."""
    if jobs is PACKED:
        return PACKED.charges(k)
    columns = jobs.columns
    base = k * _BJ
    charge = job_charge(columns[base + bj.DEFINITION_LENGTH],
                        columns[base + bj.ARGS_NODES] + DEFINITION_FIXED_NODES)
    margin = columns[base + bj.RESULT_BYTES] + columns[base + bj.FAILURE_BYTES]  # 0: none
    return charge + margin, margin


class FinishedJobs:
    """``stamps``: id -> admin-index stamp of every job still held here, in stamp order;
    each run keeps a byte per job saying whether it still is (``alive``), and is let go
    when none is. ``packed``: id -> packed tuple of every job a running server packed."""

    __slots__ = ("stamps", "_runs", "_alive", "_held", "_firsts", "_stamped", "texts",
                 "packed")

    def __init__(self) -> None:
        self.stamps: dict[bytes, int] = {}
        self._runs: list[BaseJobs | None] = []
        self._alive: list[bytearray] = []
        self._held: list[int] = []  # jobs still held per run
        self._firsts: list[int] = []  # the stamp of each run's first job (ascending)
        # per run: its jobs' stamps when they are not consecutive (a tail run), else None
        self._stamped: list[Sequence[int] | None] = []
        self.texts: dict[bytes, str] = {}  # queue and worker keys decoded so far
        self.packed: dict[bytes, tuple] = {}

    def add_packed(self, job_id: bytes, stamp: int, packed: tuple) -> None:
        """Hold a job packed by ``tay.engine.retained.packed.pack``, with its admin-index stamp."""
        self.packed[job_id] = packed
        self.stamps[job_id] = stamp

    def add(self, jobs: BaseJobs, first_stamp: int,
            stamps: Sequence[int] | None = None) -> list[bytes]:
        """Hold a run whose jobs take the stamps from ``first_stamp`` on, or ``stamps``
        (ascending, each above every stamp held so far); returns its ids."""
        ids = jobs.ids()
        self._runs.append(jobs)
        self._alive.append(bytearray(b"\x01") * len(ids))
        self._held.append(len(ids))
        self._firsts.append(first_stamp if stamps is None else stamps[0])
        self._stamped.append(stamps)
        self.stamps.update(zip(ids, range(first_stamp, first_stamp + len(ids))
                               if stamps is None else stamps))
        return ids

    def _index(self, stamp: int) -> tuple[int, int]:
        """(run, index in it) of the job with ``stamp``."""
        run = bisect_right(self._firsts, stamp) - 1
        stamped = self._stamped[run]
        return run, stamp - self._firsts[run] if stamped is None else bisect_left(stamped, stamp)

    def __len__(self) -> int:
        return len(self.stamps)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.stamps

    def where(self, job_id: bytes) -> tuple[BaseJobs, int] | tuple[PackedJobs, tuple] | None:
        """(run, index in it) of a held job, (``PACKED``, its tuple) of a packed one, else
        None."""
        stamp = self.stamps.get(job_id)
        if stamp is None:
            return None
        packed = self.packed.get(job_id)
        if packed is not None:
            return PACKED, packed
        run, k = self._index(stamp)
        return self._runs[run], k  # type: ignore[return-value]

    def row(self, job_id: bytes) -> tuple[JobRow, int, int, int] | None:
        """(row, stamp, charge, margin) of a job held in a run, else None."""
        found = self.where(job_id)
        if found is None or found[0] is PACKED:
            return None
        jobs, k = found
        return (jobs.row(k, self.texts), self.stamps[job_id], *charges(jobs, k))

    def remove(self, job_id: bytes) -> None:
        """The job is no longer held here (taken out, or expired)."""
        stamp = self.stamps.pop(job_id)
        if self.packed.pop(job_id, None) is not None:
            return
        run, k = self._index(stamp)
        self._alive[run][k] = 0
        self._held[run] -= 1
        if not self._held[run]:
            self._runs[run] = None  # its bytes and columns go

    def load(self) -> None:
        """Copy every run's bytes into memory (checked), so nothing reads the base segment
        any more: a compaction does this before it reclaims the old base, whose space is
        freed once no run holds it open. Raises ``StorageFailure`` if a read fails (the runs
        copied so far stay copied; the rest still read the segment)."""
        for jobs in self._runs:
            if jobs is not None and hasattr(jobs, "load"):
                jobs.load()

    def held_runs(self) -> Iterator[tuple[BaseJobs, list[int]]]:
        """(run, the indexes of the jobs it still holds) of every run that holds any."""
        for jobs, alive in zip(self._runs, self._alive):
            if jobs is not None:
                yield jobs, [k for k in range(len(alive)) if alive[k]]

    def held(self) -> Iterator[tuple[BaseJobs, int] | tuple[PackedJobs, tuple]]:
        """(run, index) of every job still held in a run, in stamp order, then (``PACKED``,
        tuple) of every packed one."""
        for jobs, held in self.held_runs():
            for k in held:
                yield jobs, k
        for packed in self.packed.values():
            yield PACKED, packed

"""Finished live jobs packed into one plain tuple each, out of the cycle collector's sight.

A job the server ran and finished stays retained until a compaction expires it, as a
``JobEntry``, its ``JobState`` (or a fused row), the available state a fused row holds, and
its ``LazyDefinition``: four objects the cycle collector tracks, which every full collection
walks (about 130-160 ms per collection for the 64,000 small jobs the default state budget
retains, docs/benchmarks.md). Packed, a job is one flat exact tuple of bytes, strings,
integers and None (its result and failure details as JSON text where that reads back
equal), which CPython's collector stops tracking once it has looked at it.

A packed job is held by ``FinishedJobs`` beside the columnar runs a restart leaves: readers
that only need its state, revision, terminal time, queue, task or charge read the tuple in
place (``PACKED``, the same interface as a run); anything else takes it out
(``EngineState._thaw``), which rebuilds the entry it was, equal field for field. Packing
changes nothing durable, counted or indexed: only how an untouched finished job is stored.

A job that waits (for a dispatch or its due time) is packed the same way but stays in the
engine's job table, its entry a ``ParkedJobEntry`` (tay.engine.retained.jobs) whose state
slot holds the tuple (``park``): its JobState and LazyDefinition are built again when
something reads its state, at its dispatch at the latest.
"""

from __future__ import annotations

from typing import Any

import orjson
from tay.engine.retained.jobs import (
    STATE_SLOT, WAITING, CompletedRow, JobEntry, ParkedJobEntry, peek, timeline,
)
from tay.engine.retained.packed_layout import (
    _ATTACHMENTS, CHARGE, DEFINITION, ID, MARGIN, QUEUE, READY_ORDER, REVISION, SCHEDULE_ID,
    STATE, TASK, TERMINAL_AT, attempts, job_state,
)
from tay.storage.events.definition import LazyDefinition
from tay.storage.events.transitions import JobState
from tay._native import _pure_base as bj


def packable(entry: JobEntry) -> bool:
    """Whether ``entry`` is a persistent finished job that nothing is about to touch: no
    ready key, no reservation (a job being cancelled out of an execution waits for it)."""
    return (not entry.volatile and peek(entry).terminal and entry.ready_key is None
            and entry.reservation_id is None)


def parkable(entry: JobEntry) -> bool:
    """Whether ``entry`` is a plain entry of a job that waits for a dispatch or its due
    time, with a live definition (a ``LazyDefinition``: its bytes and scalars are all a
    packed tuple needs of it) and no reservation."""
    if type(entry) is not JobEntry or entry.reservation_id is not None:
        return False
    job = STATE_SLOT.__get__(entry)
    return type(job) is JobState and job.state in WAITING \
        and type(job.definition) is LazyDefinition


def park(entry: JobEntry) -> None:
    """Hold a ``parkable`` job as its packed tuple (``ParkedJobEntry``) until it is read."""
    STATE_SLOT.__set__(entry, pack(entry))
    entry.__class__ = ParkedJobEntry


def reordered(packed: tuple, ready_order: int) -> tuple:
    """A parked job's tuple with another ready order (a compaction's order shift)."""
    return packed[:READY_ORDER] + (ready_order,) + packed[READY_ORDER + 1:]


def linked(packed: tuple, schedule_id: str) -> tuple:
    """A parked job's tuple naming the schedule whose delivery admitted it."""
    return packed[:SCHEDULE_ID] + (schedule_id,) + packed[SCHEDULE_ID + 1:]


def pack(entry: JobEntry) -> tuple:
    """The entry of a ``packable`` job as one tuple (its stamp stays in ``FinishedJobs``)."""
    row = peek(entry)
    if type(row) is CompletedRow and entry.attempts is None:
        # the fused start's and success's job (most of them): its fields taken from the
        # row as CompletedRow.job_state and .timeline take them, without building either
        job, revision, attempt, started_at, at = row
        (job_id, definition, canonical, _, _, _, _, cycle, _, _, _, inserted_at, _, _, _,
         diagnostic, _, result, failure) = job
        if type(definition) is LazyDefinition and diagnostic is None and result is None \
                and failure is None:
            return (job_id, definition.canonical, canonical, "completed", revision + 2,
                    attempt, None, cycle, None, None, None, inserted_at, started_at, at, at,
                    None, True, None, None, entry.queue, entry.task, entry.charge,
                    entry.margin, entry.schedule_id, definition.args_nodes,
                    definition.scalars, 0, 1, attempt, started_at, at, "completed")
    state = row if type(row) is JobState else row.job_state()  # a row is read, not kept
    fields = list(state)
    encoded = 0
    for bit, at in enumerate(_ATTACHMENTS):
        if fields[at] is not None:
            text = _as_json(fields[at])
            if text is not None:
                fields[at] = text
                encoded |= 1 << bit
    definition = state[DEFINITION]
    args_nodes = scalars = None
    if type(definition) is LazyDefinition:  # its bytes and scalars: no object of its own
        fields[DEFINITION] = definition.canonical
        args_nodes, scalars = definition.args_nodes, definition.scalars
    fields += (entry.queue, entry.task, entry.charge, entry.margin, entry.schedule_id,
               args_nodes, scalars, encoded)
    attempts = timeline(entry)
    if attempts is None:
        fields.append(None)
    else:
        fields.append(len(attempts))
        fields += [field for attempt in attempts for field in attempt]
    return tuple(fields)


def _as_json(attachment: Any) -> bytes | None:
    """A dict's or list's JSON text when it reads back equal, key order included; else
    None (it is kept as it is)."""
    if type(attachment) is not dict and type(attachment) is not list:
        return None
    try:
        text = orjson.dumps(attachment)
    except TypeError:  # a key or value JSON has no text for
        return None
    return text if _exact(orjson.loads(text)) == _exact(attachment) else None


def _exact(value: Any) -> Any:
    """``value`` with every map's key order and every leaf's type made part of equality."""
    if type(value) is dict:
        return [(key, _exact(item)) for key, item in value.items()]
    if type(value) is list:
        return [_exact(item) for item in value]
    return type(value), value


def unpack(packed: tuple, stamp: int, queue_row: list[int]) -> JobEntry:
    """The entry ``pack`` was given, rebuilt (``queue_row``: its queue's counts row)."""
    entry = JobEntry(job_state(packed), False, packed[CHARGE])
    entry.margin = packed[MARGIN]
    entry.stamp = stamp
    entry.attempts = attempts(packed)
    entry.schedule_id = packed[SCHEDULE_ID]
    entry.queue_row = queue_row
    return entry


class PackedJobs:
    """The run interface of ``FinishedJobs`` (``tay.storage.v2.rows.BaseJobs``'s readers)
    over packed jobs: where a run takes an index, these take the packed tuple itself. No
    ``row``: a compaction captures the tuple itself (``EpochEngine.captured_jobs``)."""

    __slots__ = ()

    @staticmethod
    def job_id(packed: tuple) -> bytes:
        return packed[ID]

    @staticmethod
    def state(packed: tuple) -> str:
        return packed[STATE]

    @staticmethod
    def revision(packed: tuple) -> int:
        return packed[REVISION]

    @staticmethod
    def terminal_at(packed: tuple) -> int:
        return packed[TERMINAL_AT]

    @staticmethod
    def text(packed: tuple, field: int, texts: Any = None) -> str:
        if field == bj.QUEUE:
            return packed[QUEUE]
        if field == bj.WORKER:
            return packed[TASK]
        raise ValueError(f"a packed job has no text field {field}")

    @staticmethod
    def charges(packed: tuple) -> tuple[int, int]:
        return packed[CHARGE], packed[MARGIN]


PACKED = PackedJobs()

"""Pure-Python twin of ``csrc/base_jobs.c``: a Store-v2 base's finished jobs as columns.

``base_jobs(buf, offsets, lengths, types, schemas, start, stop, last_id, max_depth,
max_nodes, max_binary, take_live, open_end)`` walks records ``start <= i < stop`` (Record
v1 offsets: each payload starts 24 bytes after its record) and takes every finished job it
can vouch for whole: a (7,1) snapshot the snapshot fast path accepts, in a terminal state,
its id above the previous one (``last_id``: the id before ``start``, None for none), then
the (31,2) attachments the event fast path accepts for that job at its revision, in pair
order: at most one (10,2) result when the job is completed (RESULT / RESULT_LENGTH /
RESULT_BYTES its payload and canonical size), then at most one (22,2) failure's details
(FAILURE / FAILURE_LENGTH / FAILURE_BYTES, the charge ``failure_bytes`` gives); a record
outside ``buf`` ends the walk.
With ``take_live`` it also takes a live job's snapshot (available, scheduled or retryable,
its due time present) and at most one attachment after it, a (22,2) failure_recorded the
event fast path accepts for that job at its revision (its charge: ``failure_bytes``).
With ``open_end`` the records after ``stop`` may be the last job's attachments: a job
whose records end the range is not taken. Returns ``(next, rows, live)``: the index of the
first record it did not take, ``BASE_JOB`` integers per finished job (offsets absolute in
``buf``) and ``BASE_LIVE`` per live job (``BEFORE``: the finished jobs before it in
``rows``), each an ``array('Q')`` (what the engine keeps of a run, made without an int
object per field).

``base_ids`` and ``base_keys`` gather from those rows what an engine keeps of a run per job
(its id, its queue and worker keys as indexes into the run's distinct keys).
"""

from __future__ import annotations

from array import array
from typing import Any, Sequence

from tay._native import _pure_events as er
from tay._native import _pure_snapshots as sr

BASE_JOB = 18
(RECORD, SNAPSHOT, SNAPSHOT_LENGTH, STATE, REVISION, TERMINAL_AT, QUEUE, QUEUE_LENGTH,
 WORKER, WORKER_LENGTH, DEFINITION_LENGTH, ARGS_NODES, RESULT, RESULT_LENGTH,
 RESULT_BYTES, FAILURE, FAILURE_LENGTH, FAILURE_BYTES) = range(BASE_JOB)
BASE_LIVE = 18
(BEFORE, LIVE_RECORD, LIVE_SNAPSHOT, LIVE_SNAPSHOT_LENGTH, LIVE_STATE, LIVE_REVISION, ORDER,
 HAS_ORDER, ELIGIBLE_AT, LIVE_QUEUE, LIVE_QUEUE_LENGTH, LIVE_WORKER, LIVE_WORKER_LENGTH,
 LIVE_DEFINITION_LENGTH, LIVE_ARGS_NODES, LIVE_FAILURE, LIVE_FAILURE_LENGTH,
 LIVE_FAILURE_BYTES) = range(BASE_LIVE)
FAILURE_FIXED_BYTES = 64  # failure_bytes' fixed part, as csrc/base_jobs.c has it
FRAME_HEADER = 24
COMPLETED = sr.STATES.index("completed")
EXECUTING = sr.STATES.index("executing")


def failure_bytes(row: list[int]) -> int:
    """The engine's charge of kept failure details (``tay.engine.state.failure_bytes``: the
    error texts' bytes plus the fixed part), from a failure_recorded events-scan row."""
    return FAILURE_FIXED_BYTES + sum(row[slot + 1] for slot in (er.A, er.C, er.E)
                                     if not (row[er.NIL] >> slot) & 1)


def _attachment(buf: Any, record: int, length: int, wanted: int, job_id: bytes,
                revision: int, limits: tuple) -> list[int] | None:
    """(payload offset, length, charge) of the (31,2) record at ``record`` carrying a
    (wanted,2) event for the job at its revision, taken as it is: a result's canonical size
    (10) or the failure details' charge (22); None for that or a record outside ``buf``."""
    offset = record + FRAME_HEADER
    if offset + length > len(buf) or length < 2 or buf[offset] != wanted \
            or buf[offset + 1] != 2:
        return None
    row = er.events_scan(buf, [(offset + 2, length - 2, wanted, 2)], *limits)
    start = offset + 2 + row[er.JOB_ID]
    if row[er.STATUS] != er.EVENT_FAST or row[er.EXPECTED] != revision \
            or bytes(buf[start:start + 16]) != job_id:
        return None
    return [offset, length, row[er.B] if wanted == 10 else failure_bytes(row)]


def _job_attachments(buf: Any, offsets: Sequence[int], lengths: Sequence[int],
                     types: Sequence[int], schemas: Sequence[int], first: int, stop: int,
                     job_id: bytes, revision: int, limits: tuple,
                     completed: bool) -> tuple[int, list[int], list[int]] | None:
    """A job's (31,2) attachments, records ``first`` (right after its snapshot) to ``stop``,
    in the order a base writes them: at most one result when ``completed``, then at most
    one failure's details. Returns (records used, result, failure), each attachment as
    ``_attachment`` gives it ([0, 0, 0]: none), or None when one is not an attachment the
    walk takes or they come in another order. Both row layouts take their attachments
    here."""
    result = failure = [0, 0, 0]
    used = 0
    while first + used < stop and types[first + used] == 31 and schemas[first + used] == 2:
        record = offsets[first + used]
        inner = buf[record + FRAME_HEADER] if record + FRAME_HEADER < len(buf) else 0
        if inner == 10 and used == 0 and completed:
            taken = result = _attachment(buf, record, lengths[first + used], 10, job_id,
                                         revision, limits)
        elif inner == 22 and not failure[1]:
            taken = failure = _attachment(buf, record, lengths[first + used], 22, job_id,
                                          revision, limits)
        else:
            taken = None
        if taken is None:
            return None
        used += 1
    return used, result, failure


def base_jobs(buf: Any, offsets: Sequence[int], lengths: Sequence[int], types: Sequence[int],
              schemas: Sequence[int], start: int, stop: int, last_id: bytes | None,
              max_depth: int = 64, max_nodes: int = 100_000,
              max_binary: int = 16_777_216, take_live: bool = False,
              open_end: bool = False) -> tuple[int, array, array]:
    limits = (max_depth, max_nodes, max_binary)
    previous = last_id
    rows: list[int] = []
    live: list[int] = []
    i = start
    while i < stop:
        if types[i] != 7 or schemas[i] != 1:
            break
        offset = offsets[i] + FRAME_HEADER
        length = lengths[i]
        if offset + length > len(buf):
            break
        snapshot = sr.snapshots_scan(buf, [(offset, length)], *limits)
        job_id = bytes(buf[offset:offset + 16])
        if snapshot[sr.STATUS] != er.EVENT_FAST \
                or (previous is not None and not job_id > previous):
            break
        d = sr.DEFINITION
        state = snapshot[sr.STATE]
        if state < COMPLETED:  # a live job: alone, waiting with a due time
            if not take_live or state == EXECUTING or (snapshot[sr.NIL] >> sr.ELIGIBLE_AT) & 1:
                break
            attached = _job_attachments(buf, offsets, lengths, types, schemas, i + 1, stop,
                                        job_id, snapshot[sr.REVISION], limits, False)
            if attached is None or (open_end and i + 1 + attached[0] == stop):
                break
            used, _, failure = attached
            used += 1
            has_order = 0 if (snapshot[sr.NIL] >> sr.ORDER) & 1 else 1
            live += [len(rows) // BASE_JOB, i, offset, length, state,
                     snapshot[sr.REVISION], snapshot[sr.ORDER] if has_order else 0,
                     has_order, snapshot[sr.ELIGIBLE_AT], offset + snapshot[d + er.QUEUE],
                     snapshot[d + er.QUEUE_LENGTH], offset + snapshot[d + er.WORKER],
                     snapshot[d + er.WORKER_LENGTH], snapshot[d + er.DEFINITION_LENGTH],
                     snapshot[d + er.ARGS_NODES], *failure]
            previous = job_id
            i += used
            continue
        if not (snapshot[sr.NIL] >> sr.ORDER) & 1:
            break
        # a completed job's result, then the details of its last failure
        attached = _job_attachments(buf, offsets, lengths, types, schemas, i + 1, stop, job_id,
                                    snapshot[sr.REVISION], limits, state == COMPLETED)
        if attached is None or (open_end and i + 1 + attached[0] == stop):
            break
        used, result, failure = attached
        used += 1
        rows += [i, offset, length, snapshot[sr.STATE], snapshot[sr.REVISION],
                 snapshot[sr.TERMINAL_AT], offset + snapshot[d + er.QUEUE],
                 snapshot[d + er.QUEUE_LENGTH], offset + snapshot[d + er.WORKER],
                 snapshot[d + er.WORKER_LENGTH], snapshot[d + er.DEFINITION_LENGTH],
                 snapshot[d + er.ARGS_NODES], *result, *failure]
        previous = job_id
        i += used
    return i, array("Q", rows), array("Q", live)


def base_ids(buf: Any, jobs: Sequence[int], origin: int) -> list[bytes]:
    """Every job's 16-byte id, in order, from ``base_jobs`` rows over ``buf``, whose byte 0
    is segment offset ``origin`` (``ValueError`` if an id lies outside it)."""
    ids = []
    for start in jobs[SNAPSHOT::BASE_JOB]:
        at = start - origin
        if at < 0 or at + 16 > len(buf):
            raise ValueError(f"job id at {start} outside the buffer")
        ids.append(bytes(buf[at:at + 16]))
    return ids


def base_keys(buf: Any, jobs: Sequence[int], origin: int, slot: int,
              max_distinct: int) -> tuple[array, list[bytes]] | None:
    """Every job's key in column ``slot`` (``QUEUE`` or ``WORKER``; its length in the next
    column) as ``(index, raws)``: ``raws`` the distinct keys in order of first appearance,
    ``index`` (``array('I')``) each job's position in it; None when there are more than
    ``max_distinct``. ``ValueError`` for a key outside ``buf`` or another slot."""
    if slot not in (QUEUE, WORKER):
        raise ValueError(f"slot {slot} is not a key column")
    index = array("I")
    raws: list[bytes] = []
    seen: dict[bytes, int] = {}
    for start, length in zip(jobs[slot::BASE_JOB], jobs[slot + 1::BASE_JOB]):
        at = start - origin
        if at < 0 or at + length > len(buf):
            raise ValueError(f"key at {start} outside the buffer")
        raw = bytes(buf[at:at + length])
        d = seen.get(raw)
        if d is None:
            if len(raws) == max_distinct:
                return None
            d = seen[raw] = len(raws)
            raws.append(raw)
        index.append(d)
    return index, raws

"""Pure-Python twin of ``csrc/tail_jobs.c``: a Store-v2 tail's common job lifecycles as columns.

``tail_jobs(buf, offsets, lengths, types, schemas, start, stop, next_order, max_depth,
max_nodes, max_binary)`` walks tail records ``start <= i < stop`` (Record v1 offsets: each
payload starts 24 bytes after its record) while each one is a step of the common lifecycle
that ``transitions.apply`` and ``EpochReducer`` accept: an (8,1) insert of a new id,
available at once, its availability order the allocator's next (``next_order`` on); an
(8,1) start of that job's first attempt in its first cycle, not before it is eligible; then
a (30,2) ``result_recorded`` of a nil result for it at revision 3 and an (8,1) success
finish of that execution (no diagnostic, completed) at revision 4, as the engine writes a
success, or (stores written before 2026-12-04) the finish at revision 3, then the result at
revision 4. Every payload must pass the
mutation or event fast path. It stops before the first record that is anything else
(another pair or kind, a slow payload, an id it does not know or knows in another step, a
record outside ``buf``); it never refuses.

Returns ``(next, next_order, jobs, links, pending, totals)``: ``next`` the first record it
did not take; the allocator after the records taken; per job whose four records were all
taken (a *done* job, in the order of its finish record) ``BASE_JOB`` integers (the
``_pure_base`` columns: RECORD the insert's index, SNAPSHOT / SNAPSHOT_LENGTH the insert's
payload, STATE completed, REVISION 4, TERMINAL_AT the finish's time, the definition's keys
and sizes, RESULT / RESULT_LENGTH / RESULT_BYTES the (30,2) payload and its result's
size) and ``TAIL_LINK`` integers (STAMP: how many state changes the records from ``start``
made up to and including its finish; the start and finish payloads; the start's time);
``pending``: (index, stamps before it, ready pushes before it) for each record taken of a
job that is not done (the caller replays those the exact way); ``totals``: (state
changes, ready pushes) of all records taken; ``live``: per job whose only record taken is
its insert, with expected revision 0 and eligible at once (replay leaves it available at
revision 1), or whose only records taken are its insert and its start (replay leaves it
executing at revision 2), ``TAIL_LIVE`` integers (RECORD its insert's index, ELIGIBLE_AT,
ORDER, the definition's keys and sizes, STATE ``AVAILABLE`` or ``EXECUTING``, START the
start's index (the insert's when not started), START_AT, START_STAMP the state changes from
``start`` up to and including the start (0 when not started)), in insert order: the caller
may hold such a job as that row instead of replaying its records. Offsets are absolute in
``buf``. A replay that installs the done jobs and replays the pending records with the
stamps and ready counter so positioned ends in the state the record-by-record replay
reaches.
"""

from __future__ import annotations

from array import array
from typing import Any, Sequence

from tay._native import _pure_events as er
from tay._native import _pure_mutations as mr
from tay._native._pure_base import BASE_JOB, FRAME_HEADER, COMPLETED

TAIL_LINK = 6
STAMP, STARTED, STARTED_LENGTH, STARTED_AT, FINISHED, FINISHED_LENGTH = range(TAIL_LINK)
TAIL_LIVE = 13
(RECORD, ELIGIBLE_AT, ORDER, QUEUE, QUEUE_LENGTH, WORKER, WORKER_LENGTH, DEFINITION_LENGTH,
 ARGS_NODES, STATE, START, START_AT, START_STAMP) = range(TAIL_LIVE)
# a live row's STATE: the index of available or executing in transitions.STATES
AVAILABLE, EXECUTING = 1, 2
# a job's step: inserted (available), executing, completed (no result yet), done, or
# executing with its result (the result recorded before the finish)
_INSERTED, _EXECUTING, _COMPLETED, _DONE, _RESULTED = 1, 2, 3, 4, 5


class _Job:
    __slots__ = ("step", "insert", "eligible_at", "started", "started_at", "finished",
                 "finished_at", "stamp", "result", "result_bytes", "keys", "order", "start_stamp")


def _mutation(buf: Any, offset: int, length: int, limits: tuple) -> list[int] | None:
    row = mr.mutations_scan(buf, [(offset, length)], *limits)
    return row if row[er.STATUS] == er.EVENT_FAST else None


def _result(buf: Any, offset: int, length: int, limits: tuple) -> list[int] | None:
    """The inner result_recorded row of a (30,2) payload at revision expected + 1."""
    if length < 10 or buf[offset] != 10 or buf[offset + 1] != 2:
        return None
    revision = int.from_bytes(buf[offset + 2:offset + 10], "big")
    row = er.events_scan(buf, [(offset + 10, length - 10, 10, 2)], *limits)
    if row[er.STATUS] != er.EVENT_FAST or revision != row[er.EXPECTED] + 1:
        return None
    return row


def _step(table: Any, numbered: list[_Job], job_id: bytes) -> int | None:
    number = table.find(job_id)
    return None if number is None else numbered[number].step


def tail_jobs(buf: Any, offsets: Sequence[int], lengths: Sequence[int], types: Sequence[int],
              schemas: Sequence[int], start: int, stop: int, next_order: int,
              max_depth: int = 64, max_nodes: int = 100_000, max_binary: int = 16_777_216
              ) -> tuple[int, int, array, array, array, tuple[int, int], array]:
    limits = (max_depth, max_nodes, max_binary)
    from tay._native._pure_live import LiveTable  # here: recovery imports this module

    table = LiveTable(next_order)  # the jobs' durable rows; job numbers are its row numbers
    numbered: list[_Job] = []
    finishes: list[_Job] = []
    taken: list[tuple[int, _Job, int]] = []  # (index, job, stamps the record adds)
    stamps = readies = 0
    i = start
    while i < stop:
        offset = offsets[i] + FRAME_HEADER
        length = lengths[i]
        if offset + length > len(buf):
            break
        pair = (types[i], schemas[i])
        if pair == (8, 1):
            row = _mutation(buf, offset, length, limits)
            if row is None:
                break
            kind, at = row[mr.KIND], row[er.AT]
            # the walk's lifecycle: an insert available at once, its start, a success; the
            # live table applies each as the reducer would, or refuses it (the walk stops)
            if kind not in (1, 3, 4) or (kind == 1 and (row[er.NIL] >> mr.ORDER) & 1):
                break
            job_id = bytes(buf[offset:offset + 16])
            resulted = kind == 4 and _step(table, numbered, job_id) == _RESULTED
            if resulted:  # the live table knows no results: it applies this finish as the
                row = list(row)  # finish of revision 2 (a done job's row is never read)
                row[er.EXPECTED] -= 1
            number = table.apply_one(job_id, row)
            if number is None:
                break
            if kind == 1:
                job = _Job()
                numbered.append(job)
                job.step, job.insert, job.eligible_at = _INSERTED, i, row[er.A]
                job.keys = [offset + row[er.QUEUE], row[er.QUEUE_LENGTH],
                            offset + row[er.WORKER], row[er.WORKER_LENGTH],
                            row[er.DEFINITION_LENGTH], row[er.ARGS_NODES]]
                job.order = row[mr.ORDER]
                readies += 1
            elif kind == 3:
                job = numbered[number]
                job.step, job.started, job.started_at = _EXECUTING, i, at
                job.start_stamp = stamps + 1
            else:
                job = numbered[number]
                job.step = _DONE if resulted else _COMPLETED
                job.finished, job.finished_at = i, at
                job.stamp = stamps + 1
                finishes.append(job)
        elif pair == (30, 2):
            row = _result(buf, offset, length, limits)
            if row is None:
                break
            start_id = offset + 10 + row[er.JOB_ID]
            number = table.find(bytes(buf[start_id:start_id + 16]))
            job = None if number is None else numbered[number]
            if job is None or (job.step, row[er.EXPECTED]) not in ((_COMPLETED, 3),
                                                                   (_EXECUTING, 2)) \
                    or row[er.B] != 1 or buf[offset + 10 + row[er.A]] != 0:
                break
            job.step = _DONE if job.step == _COMPLETED else _RESULTED
            job.result, job.result_bytes = i, row[er.B]
        else:
            break
        adds = 0 if pair == (30, 2) else 1
        taken.append((i, job, adds))
        stamps += adds
        i += 1
    rows: list[int] = []
    links: list[int] = []
    for job in finishes:
        if job.step != _DONE:
            continue
        insert, started, finished, result = job.insert, job.started, job.finished, job.result
        queue, queue_length, worker, worker_length, definition_length, nodes = job.keys
        rows += [insert, offsets[insert] + FRAME_HEADER, lengths[insert], COMPLETED, 4,
                 job.finished_at, queue, queue_length, worker, worker_length,
                 definition_length, nodes, offsets[result] + FRAME_HEADER, lengths[result],
                 job.result_bytes]
        links += [job.stamp, offsets[started] + FRAME_HEADER, lengths[started],
                  job.started_at, offsets[finished] + FRAME_HEADER, lengths[finished]]
    pending: list[int] = []
    before = ready = 0
    for index, job, adds in taken:
        if job.step != _DONE:
            pending += [index, before, ready]
        if types[index] == 8 and index == job.insert:
            ready += 1
        before += adds
    live: list[int] = []
    for job in numbered:  # insert order; expected 0 and eligible at once: live
        if job.step == _INSERTED:
            live += [job.insert, job.eligible_at, job.order, *job.keys, AVAILABLE, job.insert,
                     0, 0]
        elif job.step == _EXECUTING:
            live += [job.insert, job.eligible_at, job.order, *job.keys, EXECUTING, job.started,
                     job.started_at, job.start_stamp]
    assert len(rows) // BASE_JOB == len(links) // TAIL_LINK
    return i, table.next_order, array("Q", rows), array("Q", links), array("Q", pending), \
        (stamps, readies), array("Q", live)

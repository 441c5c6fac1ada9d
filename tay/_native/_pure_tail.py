"""Pure-Python twin of ``csrc/tail_jobs.c``: a Store-v2 tail's common job lifecycles as columns.

``tail_jobs(buf, offsets, lengths, types, schemas, start, stop, next_order, max_depth,
max_nodes, max_binary)`` walks tail records ``start <= i < stop`` (Record v1 offsets: each
payload starts 24 bytes after its record) while each one is a step of the common lifecycle
that ``transitions.apply`` and ``EpochReducer`` accept: an (8,1) insert of a new id,
available at once, its availability order the allocator's next (``next_order`` on); an
(8,1) start of that job's first attempt in its first cycle, not before it is eligible; then
a (30,2) ``result_recorded`` of its result at revision 3 and an (8,1) success
finish of that execution (no diagnostic, completed) at revision 4, as the engine writes a
success, or (stores written before 2026-12-04) the finish at revision 3, then the result at
revision 4. After the start it also follows a worker failure of that first attempt, left
retryable or discarded (max_attempts 1): its (22,2) ``failure_recorded`` details at
revision 3 and its finish at revision 4 (the engine's order), or the finish at 3 with the
details right after it at 4; when the failure left it retryable, the table's row is set
retryable (``LiveTable.retryable``) and the walk follows its retry: the availability, the
start of attempt 2, its result and the success at revisions 5-8 (a retried success,
held as a completed live row). A delayed insert (no order: scheduled, a timer push) is
followed through its (8,1) availability (its order the allocator's next, a ready push) and
then the lifecycle above, each step one revision later (the success finish at 5; a
failure's details and finish at 4 and 5, its retry not followed). A timeout of a first
attempt (the engine's finish, outcome timed out, no details) is held as a failure is, at
its finish, its retry not followed. An (8,1) cancel of a job
waiting at its insert (available or scheduled, revision 1) or at its delayed availability
(revision 2), with no execution token nor order, makes the job done (``CANCELLED`` at the
next revision: no start nor result in its columns). Every
payload must pass the mutation or event fast path. A record of a job it knows outside that
lifecycle (a timeout, a second failure, a delayed job's retry, anything
after a cancel...) sends the job the general way: the walk goes on, and every record of that job
is pending (each such mutation one state change, and a ready push when it carries an
order, which the allocator takes there). So goes a job inserted before ``start`` (one in
flight at a compaction's capture, or one whose insert an exact batch took), held by its id
(``LiveTable.hold``); an insert of that id stops the walk. A (30,2) of a schedule, a queue
or a day (``OF_NO_JOB``: a schedule's occurrence, a day's totals every minute) changes no
job's state: it is pending (the exact replay checks and applies it) and the walk goes on.
An operator's requeue (23,2), expedite (27,2) or deletion (29,2) of a job (``JOB_STEPS``)
sends that job the general way (a requeue or an expedite is one state change and a ready
push, its order the allocator's next).
It stops before the first record that is anything else (another pair or kind, a slow
payload, an insert it refuses, an order not the allocator's, a record outside ``buf``);
it never refuses.

Returns ``(next, next_order, jobs, links, pending, totals)``: ``next`` the first record it
did not take; the allocator after the records taken; per job whose four records were all
taken (a *done* job, in the order of its finish record) ``BASE_JOB`` integers (the
``_pure_base`` columns: RECORD the insert's index, SNAPSHOT / SNAPSHOT_LENGTH the insert's
payload, STATE completed, REVISION 4 (5 delayed), TERMINAL_AT the finish's time, the
definition's keys and sizes, RESULT / RESULT_LENGTH / RESULT_BYTES the (30,2) payload and
its result's size, FAILURE / FAILURE_LENGTH / FAILURE_BYTES 0) and ``TAIL_LINK`` integers
(STAMP: how many state changes the records from ``start`` made up to and including its
finish; the start and finish payloads; the start's time; AVAILABILITY /
AVAILABILITY_LENGTH a delayed job's availability payload, 0 otherwise); ``pending``: (index, stamps before it, ready pushes before it, done delayed
jobs' inserts before it) for each record taken of a job that is not done (the caller
replays those the exact way; the last count is the timer pushes replay makes that the
columns skip); ``totals``: the same three of all records taken; ``live``: per job whose
only record taken is its insert, with expected revision 0 (replay leaves it available at
revision 1 when eligible at once, else ``SCHEDULED``), or whose only records taken are its
insert and its start (replay leaves it
executing at revision 2), ``TAIL_LIVE`` integers (RECORD its insert's index, ELIGIBLE_AT,
ORDER, the definition's keys and sizes, STATE ``AVAILABLE`` or ``EXECUTING``, START the
start's index (the insert's when not started), START_AT, START_STAMP the state changes from
``start`` up to and including the start (0 when not started)), in insert order: the caller
may hold such a job as that row instead of replaying its records. So does a job whose four
records taken are its insert, start, failure finish and details (STATE ``RETRYABLE`` or
``DISCARDED``, ELIGIBLE_AT the retry's due time (0 when discarded), FINISH / FINISH_AT /
FINISH_STAMP the finish's index, time and state changes up to it, DETAILS the details' index, FAILURE_BYTES the error texts'
UTF-8 bytes plus 64, ``tay.engine.state.failure_bytes``; a delayed job's failure,
AVAILABILITY_RECORD the index of its availability between its insert and start (the insert's
otherwise), its insert's timer push counted with the skipped ones). So does a job whose eight records
taken are such a retryable failure, its retry's availability, start, nil result and success
(STATE ``COMPLETED``, START / START_AT and FINISH / FINISH_AT the first attempt's, RETRY
the availability's index, RESTART / RESTART_AT the retry's start, RESULT, COMPLETE /
COMPLETE_AT / COMPLETE_STAMP the success's finish); its records are pending, its failure's
timer pushes (at the finish, and at the details after it) counted as skipped. Index fields
a row does not use hold its insert's index, the others 0. Offsets are absolute in
``buf``. A replay that installs the done jobs and replays the pending records with the
stamps and ready counter so positioned ends in the state the record-by-record replay
reaches.
"""

from __future__ import annotations

from array import array
from typing import Any, Sequence

from tay._native import _pure_events as er
from tay._native import _pure_mutations as mr
from tay._native._pure_base import BASE_JOB, FRAME_HEADER, COMPLETED, failure_bytes

CANCELLED = 5  # a done job's STATE when a cancel made it done (transitions.STATES)
# the (30,2) inner types (schema 2) on a chain of their own that change no job's state: a
# schedule's delivery (11) and state (13), which the server writes at each occurrence; a
# queue's pause (20), resume (21), scale (24) and rate limit (28); a schedule's pause (25)
# and resume (26); a day's totals (32), which the server writes every minute. The
# registry's epoch-carried pairs whose entity is not a job (tested equal)
OF_NO_JOB = frozenset({11, 13, 20, 21, 24, 25, 26, 28, 32})
# the (30,2) inner types of an operator's step of one job: a requeue of a cancelled job
# (23), an expedite of a scheduled one (27), a finished job's deletion (29)
JOB_STEPS = frozenset({23, 27, 29})

TAIL_LINK = 8
(STAMP, STARTED, STARTED_LENGTH, STARTED_AT, FINISHED, FINISHED_LENGTH, AVAILABILITY,
 AVAILABILITY_LENGTH) = range(TAIL_LINK)
TAIL_LIVE = 27
(RECORD, ELIGIBLE_AT, ORDER, QUEUE, QUEUE_LENGTH, WORKER, WORKER_LENGTH, DEFINITION_LENGTH,
 ARGS_NODES, STATE, START, START_AT, START_STAMP, FINISH, FINISH_AT, FINISH_STAMP, DETAILS,
 FAILURE_BYTES, RETRY, RESTART, RESTART_AT, RESULT, COMPLETE, COMPLETE_AT,
 COMPLETE_STAMP, RESULT_BYTES, AVAILABILITY_RECORD) = range(TAIL_LIVE)
# a live row's STATE: its index in transitions.STATES (COMPLETED: a retried job's success)
SCHEDULED, AVAILABLE, EXECUTING, RETRYABLE, DISCARDED = 0, 1, 2, 3, 6
# a job's step: inserted (available), executing, completed (no result yet), done,
# executing with its result (the result recorded before the finish), scheduled (a delayed
# insert waiting for its availability; the job is then delayed: each later step one
# revision on), or sent the general way (a record of it outside the lifecycle: all its
# records are replayed the exact way);
# then the failure lifecycle, which the live table does not apply (once a retryable
# failure is held, _hold_failure sets the job's row retryable): failed (a worker
# failure's finish left it retryable or discarded, waiting for the details), detailed
# (executing with the failure's details, waiting for the finish), both (held as a row);
# cancelled: done by a cancel while it waited (any later record sends it the general way)
(_INSERTED, _EXECUTING, _COMPLETED, _DONE, _RESULTED, _SCHEDULED, _GENERAL, _FAILED, _DETAILED,
 _FAILURE_HELD, _CANCELLED) = range(1, 12)
# transitions.retry_window(1) and failure_bytes' fixed part, as csrc/tail_jobs.c has them
_FIRST_RETRY_LOW, _FIRST_RETRY_HIGH = 1000, 1250
_TIME_MAX = 2**63 - 1


class _Job:
    __slots__ = ("step", "insert", "eligible_at", "started", "started_at", "finished",
                 "finished_at", "stamp", "result", "result_bytes", "keys", "order", "start_stamp",
                 "max_attempts", "due", "details", "failure_bytes", "failed_state", "delayed",
                 "available", "shift", "retried", "first_start", "first_start_at",
                 "fail_finish", "fail_at", "revision", "timed_out")


def _failure_finish(row: list[int], job: _Job, ordered: bool) -> int:
    """The state a finish leaves when the reducer accepts it as a worker failure of the
    job's first attempt (executing at revision 2, or 3 after its failure's details; a
    delayed job's one later):
    outcome failed, the start's execution token (2, a delayed job's 3), no order, and either disposition retryable
    with next attempt 2 within max_attempts and the retry due inside the first window
    (``RETRYABLE``), or, max_attempts 1, disposition discarded (``DISCARDED``; the scan
    checked it has no next attempt nor due time); 0 for any other finish."""
    at, due = row[er.AT], row[er.F]
    # outcome failed (1), or timed out (2: the engine's own finish, no details)
    outcome_ok = row[er.C] == 1 or (row[er.C] == 2 and job.step == _EXECUTING)
    if ordered or not outcome_ok or row[er.A] != 2 + job.shift \
            or row[er.EXPECTED] != (3 if job.step == _DETAILED else 2) + job.shift:
        return 0
    if row[er.B] == 1 and row[er.E] == 2 and job.max_attempts >= 2 \
            and min(_TIME_MAX, at + _FIRST_RETRY_LOW) <= due \
            <= min(_TIME_MAX, at + _FIRST_RETRY_HIGH):
        return RETRYABLE
    if row[er.B] == 2 and job.max_attempts == 1:
        return DISCARDED
    return 0


def _waiting_cancel(row: list[int], job: _Job, ordered: bool) -> bool:
    """Whether a cancel is one the reducer accepts of a job waiting at its insert,
    available or scheduled (revision 1), or available after its delayed availability
    (revision 2): at that revision, no execution token, no order."""
    if ordered or not (row[er.NIL] >> er.A) & 1 or job.retried:
        return False
    if job.step == _SCHEDULED:
        return row[er.EXPECTED] == 1
    return job.step == _INSERTED and row[er.EXPECTED] == (2 if job.delayed else 1)


def _in_columns(job: _Job) -> bool:
    """Whether the job is done in columns: completed at its first attempt (a retried
    success is a live row), or cancelled while it waited."""
    return (job.step == _DONE and not job.retried) or job.step == _CANCELLED


def _skips_insert_timer(job: _Job) -> bool:
    """Whether the job is held (in columns or as a failed row) past its delayed insert:
    replay pushed the insert's timer, stale by then, and the holder does not, so the
    tiebreak skips it."""
    return bool(job.delayed) and (_in_columns(job) or job.step == _FAILURE_HELD)


def _hold_failure(table: Any, job: _Job, number: int) -> None:
    """A worker failure held with its details leaves a retryable job's live row retryable
    at revision 4 (next attempt 2, due at the retry's time): the table then follows the
    retry's availability, start and success as it follows a first attempt's. A delayed
    job's retry, or a timed-out job's, is not followed (its row stays executing: the retry
    goes the general way)."""
    if job.failed_state == RETRYABLE and not job.delayed and not job.timed_out:
        table.retryable(number, 4, 2, job.due)


def _hold_unknown(table: Any, numbered: list, job_id: bytes) -> int:
    """A job inserted before the walk's range (in flight at a compaction's capture, or one
    whose insert an exact batch took), held in the table by its id (``LiveTable.hold``:
    every apply refuses it, a later insert of that id included, which stops the walk) as a
    job sent the general way: all its records pending. Its number."""
    number = table.hold(job_id)
    job = _Job()
    job.step, job.insert = _GENERAL, -1  # no record of the walk's is its insert
    job.delayed = job.shift = job.retried = job.timed_out = 0
    numbered.append(job)
    return number


def _mutation(buf: Any, offset: int, length: int, limits: tuple) -> list[int] | None:
    row = mr.mutations_scan(buf, [(offset, length)], *limits)
    return row if row[er.STATUS] == er.EVENT_FAST else None


def _event(buf: Any, offset: int, length: int, inner: int, limits: tuple) -> list[int] | None:
    """The row of the (inner, 2) event a (30,2) payload carries (its revision not checked),
    or None when the scan does not vouch for it."""
    row = er.events_scan(buf, [(offset + 10, length - 10, inner, 2)], *limits)
    return row if row[er.STATUS] == er.EVENT_FAST else None


def tail_jobs(buf: Any, offsets: Sequence[int], lengths: Sequence[int], types: Sequence[int],
              schemas: Sequence[int], start: int, stop: int, next_order: int,
              max_depth: int = 64, max_nodes: int = 100_000, max_binary: int = 16_777_216
              ) -> tuple[int, int, array, array, array, tuple[int, int, int], array]:
    limits = (max_depth, max_nodes, max_binary)
    from tay._native._pure_live import LiveTable  # here: recovery imports this module

    table = LiveTable(next_order)  # the jobs' durable rows; job numbers are its row numbers
    numbered: list[_Job] = []
    finishes: list[_Job] = []
    # (index, job, stamps the record adds, ready pushes it makes, pending whatever its job)
    taken: list[tuple[int, _Job | None, int, int, bool]] = []
    stamps = readies = 0
    i = start
    while i < stop:
        offset = offsets[i] + FRAME_HEADER
        length = lengths[i]
        if offset + length > len(buf):
            break
        pair = (types[i], schemas[i])
        pushes = 0
        adds = 0 if pair == (30, 2) else 1  # an (8,1) changes its job's state
        always = False  # pending though its job is in columns (a deletion of a done job)
        if pair == (8, 1):
            row = _mutation(buf, offset, length, limits)
            if row is None:
                break
            kind, at = row[mr.KIND], row[er.AT]
            ordered = not (row[er.NIL] >> mr.ORDER) & 1
            # the walk's lifecycle: an insert available at once, its start, a success; the
            # live table applies each as the reducer would, or refuses it: the walk stops at
            # an insert it refuses, and any other record of a job it knows sends that job
            # the general way (below)
            job_id = bytes(buf[offset:offset + 16])
            found = None if kind == 1 else table.find(job_id)
            if kind != 1 and found is None:
                # a job inserted before ``start`` (in flight at a compaction's capture, or
                # one an exact batch took): held by its id, the general way (below)
                found = _hold_unknown(table, numbered, job_id)
            job = None if found is None else numbered[found]
            number = None
            failed_state = _failure_finish(row, job, ordered) \
                if kind == 4 and not job.retried and job.step in (_EXECUTING, _DETAILED) else 0
            if kind == 5 and _waiting_cancel(row, job, ordered):
                # done: cancelled at the next revision; its ready or timer push stale
                number = found
                job.step, job.revision = _CANCELLED, row[er.EXPECTED] + 1
                job.finished, job.finished_at, job.stamp = i, at, stamps + 1
                finishes.append(job)
            elif failed_state:
                # the live table applies no failure: the job's row there stays executing
                # until the failure is held whole (finish and details), then it is set
                # retryable (_hold_failure) for the retry
                number = found
                # a timeout has no details: held at its finish
                job.timed_out = int(row[er.C] == 2)
                job.step = _FAILURE_HELD if job.step == _DETAILED or job.timed_out else _FAILED
                if job.timed_out:
                    job.details, job.failure_bytes = job.insert, 0
                job.failed_state = failed_state
                job.finished, job.finished_at, job.stamp = i, at, stamps + 1
                job.due = row[er.F] if failed_state == RETRYABLE else 0
                if job.step == _FAILURE_HELD:
                    _hold_failure(table, job, found)
            elif kind == 1 or (kind in (3, 4) and job.step < _GENERAL) \
                    or (kind == 2 and (job.step == _SCHEDULED or (
                        job.step == _FAILURE_HELD and not job.delayed and not job.timed_out
                        and job.failed_state == RETRYABLE))):
                resulted = kind == 4 and job.step == _RESULTED
                if resulted:  # the live table knows no results: it applies this finish as
                    row = list(row)  # the finish of revision 2 (a done job's row is unread)
                    row[er.EXPECTED] -= 1
                number = table.apply_one(job_id, row)
                if number is None and kind == 1:
                    break
                if kind == 1 and number is not None:
                    # available at once (a ready push), or delayed: scheduled until its
                    # availability (a timer push, no order)
                    job = _Job()
                    numbered.append(job)
                    job.step = _INSERTED if ordered else _SCHEDULED
                    job.delayed = job.shift = int(not ordered)
                    job.retried = job.available = job.timed_out = 0
                    job.insert, job.eligible_at = i, row[er.A]
                    job.keys = [offset + row[er.QUEUE], row[er.QUEUE_LENGTH],
                                offset + row[er.WORKER], row[er.WORKER_LENGTH],
                                row[er.DEFINITION_LENGTH], row[er.ARGS_NODES]]
                    job.order = row[mr.ORDER]
                    job.max_attempts = row[er.MAX_ATTEMPTS]
                    pushes = int(ordered)
                    readies += pushes
                elif kind == 2 and number is not None:
                    # a delayed job's availability, or a retry's (the first attempt's start
                    # and failure finish kept aside)
                    if job.step == _FAILURE_HELD:
                        job.retried, job.shift = 1, 4
                        job.first_start, job.first_start_at = job.started, job.started_at
                        job.fail_finish, job.fail_at = job.finished, job.finished_at
                    job.step, job.available, job.order = _INSERTED, i, row[mr.ORDER]
                    pushes = 1
                    readies += 1
                elif kind == 3 and number is not None:
                    job.step, job.started, job.started_at = _EXECUTING, i, at
                    job.start_stamp = stamps + 1
                elif number is not None:
                    job.step = _DONE if resulted else _COMPLETED
                    job.finished, job.finished_at = i, at
                    job.stamp = stamps + 1
                    finishes.append(job)
            if number is None:
                # a record of a known job outside the lifecycle: the job goes the general
                # way (all its records replayed the exact way); an accepted mutation is one
                # state change and pushes ready exactly when it carries an order, which the
                # allocator takes here (the exact replay trusts the walk's check)
                if ordered:
                    if row[mr.ORDER] != table.next_order:
                        break
                    table.next_order += 1
                job.step = _GENERAL
                pushes = int(ordered)
                readies += pushes
        elif pair == (30, 2) and length >= 10 and buf[offset + 1] == 2 \
                and buf[offset] in OF_NO_JOB:
            # an event of a schedule, a queue or a day: never a job's state change nor a
            # ready push; taken as pending, so that the exact replay (which checks its
            # entity's chain) applies it in its place and the walk goes on. A schedule's
            # delivery names its job, whose link to the schedule the engine keeps beside
            # the job wherever it is held (a job done here, in its columns), so the job
            # stays in the walk
            job = None
        elif pair == (30, 2):
            if length < 10 or buf[offset + 1] != 2:
                break
            # a job's result (10,2) or a worker failure's details (22,2): never a state
            # change nor a ready push; or an operator's step of a job (JOB_STEPS): its job
            # goes the general way. A payload the event scan does not vouch for stops the
            # walk (the exact decoder decides)
            inner = buf[offset]
            row = _event(buf, offset, length, inner, limits) \
                if inner in (10, 22) or inner in JOB_STEPS else None
            if row is None:
                break
            start_id = offset + 10 + row[er.JOB_ID]
            job_id = bytes(buf[start_id:start_id + 16])
            found = table.find(job_id)
            if found is None:  # a job inserted before ``start``: held, as above
                found = _hold_unknown(table, numbered, job_id)
            job = numbered[found]
            expected = row[er.EXPECTED]
            consecutive = int.from_bytes(buf[offset + 2:offset + 10], "big") == expected + 1
            if inner in JOB_STEPS:
                # outside every lifecycle the walk holds: the general way. A requeue or an
                # expedite leaves the job available (the reducer accepts only that): one
                # state change and a ready push, its order the allocator's next (the
                # (30,2) carries none). A deletion changes neither (the engine drops the
                # job); a later insert of its id stops the walk (the table holds the id)
                if inner == 29 and _in_columns(job):
                    # the deletion of a job done here: the job stays in the columns, and
                    # the deletion, pending, drops it from there in its place (the
                    # consumer reads its state and revision in place)
                    always = True
                else:
                    job.step = _GENERAL
                if inner != 29:
                    table.next_order += 1
                    adds = pushes = 1
                    readies += 1
            elif inner == 22:
                # held with its finish when right before it (the engine's order) or right
                # after it (stores before 2026-12-04), each at its revision (a delayed job's
                # one later); elsewhere the job goes the general way
                step = (job.step, expected - job.shift)
                if consecutive and not job.retried and (step == (_EXECUTING, 2) or (
                        step == (_FAILED, 3) and job.finished + 1 == i)):
                    job.step = _DETAILED if job.step == _EXECUTING else _FAILURE_HELD
                    job.details, job.failure_bytes = i, failure_bytes(row)
                    if job.step == _FAILURE_HELD:
                        _hold_failure(table, job, found)
                else:
                    job.step = _GENERAL
            elif not consecutive or (job.step, expected - job.shift) not in (
                    (_COMPLETED, 3), (_EXECUTING, 2)):
                job.step = _GENERAL  # a result outside the lifecycle: the general way
            else:
                job.step = _DONE if job.step == _COMPLETED else _RESULTED
                job.result, job.result_bytes = i, row[er.B]
        else:
            break
        taken.append((i, job, adds, pushes, always))
        stamps += adds
        i += 1
    rows: list[int] = []
    links: list[int] = []
    for job in finishes:
        if not _in_columns(job):
            continue
        cancelled = job.step == _CANCELLED
        insert, finished = job.insert, job.finished
        queue, queue_length, worker, worker_length, definition_length, nodes = job.keys
        if cancelled:  # no start nor result
            state, revision, result, started = CANCELLED, job.revision, [0, 0, 0], [0, 0, 0]
        else:
            state, revision = COMPLETED, 4 + job.shift
            result = [offsets[job.result] + FRAME_HEADER, lengths[job.result], job.result_bytes]
            started = [offsets[job.started] + FRAME_HEADER, lengths[job.started], job.started_at]
        rows += [insert, offsets[insert] + FRAME_HEADER, lengths[insert], state, revision,
                 job.finished_at, queue, queue_length, worker, worker_length,
                 definition_length, nodes, *result, 0, 0, 0]  # no failure's details
        # a delayed job's availability (a cancelled one's when it came before the cancel)
        available = job.available if job.delayed else 0
        links += [job.stamp, *started, offsets[finished] + FRAME_HEADER, lengths[finished],
                  offsets[available] + FRAME_HEADER if available else 0,
                  lengths[available] if available else 0]
    pending: list[int] = []
    before = ready = timers = 0
    for index, job, adds, pushes, always in taken:
        # job None: a record of no job (OF_NO_JOB), always pending
        if job is None or not _in_columns(job) or always:
            pending += [index, before, ready, timers]
        if job is not None:
            retried = job.step == _DONE and job.retried  # held as a completed row
            if index == job.insert and _skips_insert_timer(job):
                timers += 1
            if retried and (index == job.fail_finish
                            or index == job.details and job.details > job.fail_finish):
                timers += 1  # its failure's (then stale) timer push: at the finish, and
                # at the details when they came after it (the older order)
        ready += pushes
        before += adds
    live: list[int] = []
    for job in numbered:  # insert order; a delayed or retried job past its insert and not
        insert = job.insert  # done: the general way
        unused = [insert, insert, 0, insert, insert, 0, 0, 0, insert]  # RETRY.. the last
        if job.step == _SCHEDULED:
            live += [insert, job.eligible_at, job.order, *job.keys, SCHEDULED, insert,
                     0, 0, insert, 0, 0, insert, 0, *unused]
        elif job.step == _DONE and job.retried:
            live += [insert, 0, job.order, *job.keys, COMPLETED, job.first_start,
                     job.first_start_at, 0, job.fail_finish, job.fail_at, 0, job.details,
                     job.failure_bytes, job.available, job.started, job.started_at,
                     job.result, job.finished, job.finished_at, job.stamp, job.result_bytes,
                     insert]
        elif job.step == _FAILURE_HELD:  # a delayed job's failure too
            live += [insert, job.due, job.order, *job.keys, job.failed_state, job.started,
                     job.started_at, job.start_stamp, job.finished, job.finished_at, job.stamp,
                     job.details, job.failure_bytes, *unused[:-1],
                     job.available if job.delayed else insert]
        elif job.shift:
            continue
        elif job.step == _INSERTED:
            live += [insert, job.eligible_at, job.order, *job.keys, AVAILABLE, insert,
                     0, 0, insert, 0, 0, insert, 0, *unused]
        elif job.step == _EXECUTING:
            live += [insert, job.eligible_at, job.order, *job.keys, EXECUTING, job.started,
                     job.started_at, job.start_stamp, insert, 0, 0, insert, 0, *unused]
    assert len(rows) // BASE_JOB == len(links) // TAIL_LINK
    return i, table.next_order, array("Q", rows), array("Q", links), array("Q", pending), \
        (stamps, readies, timers), array("Q", live)

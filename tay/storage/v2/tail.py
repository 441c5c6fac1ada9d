"""Finished tail jobs taken whole by the columnar tail replay (``tay._native.tail_jobs``).

After a restart without a compaction most of the tail is jobs that went through the common
lifecycle: an insert, a start, a success and a nil result, four records each (five for a
delayed job: its availability after the insert). The native
walk vouches for such a job's four records (each passes the fast path, each is the step
``transitions.apply`` and the reducer accept, the availability order is the allocator's),
and the engine keeps the job in its finished columns (``tay.engine.retained.finished``) as it keeps
a base run's: ``TailJobs`` has the same ``BASE_JOB`` columns over one copy of the run's
bytes, plus a few links per job (its start and finish records, its stamp). A job is built
(``TailRow.job_state``) the way replay builds it: its four records through the fast
decoders and a reducer, so the JobState is the one the record-by-record replay makes.

A job of which the walk took only the insert (a job still waiting at the end of the tail
or where the walk stopped) is a ``LiveRow`` (a ``ScheduledRow`` when delayed): the engine
holds it, available (or scheduled), as that row until something reads its state, which
is then built by replaying its insert the same way.
A job of which it took the insert and the start (executing when the tail was cut) is
built from both at once, in a batch with the others (``executing_rows``), and installed
executing: the recovery's activation settles (interrupts) every such job, so it would be
built then anyway. A job of which it took the insert, the start and a worker failure (its
finish and details) that left it retryable or discarded is a ``FailedRow``, built on first
read from its four records (a retryable one's retry is due a second later, when its timer
builds it); one whose retry then succeeded is a ``RetriedRow``, completed, built on first
read from its eight.
"""

from __future__ import annotations

from array import array
from typing import Any, Iterator

from tay._native import _pure_base as bj
from tay._native import _pure_tail as tl
from tay.storage.events.transitions import JobState
from tay.storage.formats.value import DecodeLimits
from tay.storage.v2.epoch_records import EPOCH_EVENT_PAIR, decode_epoch_event
from tay.storage.v2.fast import decode_batch
from tay.storage.v2.records import MUTATION_PAIR, decode_mutation
from tay.storage.v2.reducer import EpochReducer
from tay.storage.v2.rows import BaseJobs, BaseSource, HeldJobs, JobRow, attached, joined

_BJ = bj.BASE_JOB
_TL = tl.TAIL_LINK


def replay_job(records: list[tuple[bytes, tuple[int, int]]], limits: DecodeLimits) -> JobState:
    """One job's tail records, in order, through the decoders and a reducer of its own, as
    ``replay_v2`` feeds them (each insert's order is the allocator's: checked at replay)."""
    return replay_runs([records], limits)[0]


def replay_runs(runs: list[list[tuple[Any, tuple[int, int]]]],
                limits: DecodeLimits) -> list[JobState]:
    """``replay_job`` of several jobs (distinct ids) at once, each given as its records in
    order, joined into one buffer for ``replay_spans``. Returns each job's state, in order."""
    payloads: list[Any] = []
    pairs: list[tuple[int, int]] = []
    ends: list[int] = []  # where each job's spans end
    for records in runs:
        for payload, pair in records:
            payloads.append(payload)
            pairs.append(pair)
        ends.append(len(payloads))
    buffer, starts = joined(payloads)
    spans = [(start, len(payload), *pair)
             for start, payload, pair in zip(starts, payloads, pairs)]
    return replay_spans(buffer, spans, ends, limits)


def replay_jobs(buffer: Any, records: list[tuple[tuple[int, int], ...]],
                limits: DecodeLimits) -> list[JobState]:
    """``replay_job`` of many jobs at once (distinct ids), each given as the (offset,
    length) spans of its (8,1) payloads in ``buffer``, in order. Returns each job's state."""
    spans: list[tuple[int, int, int, int]] = []
    ends: list[int] = []
    for job in records:
        spans += [(offset, length, *MUTATION_PAIR) for offset, length in job]
        ends.append(len(spans))
    return replay_spans(buffer, spans, ends, limits)


def replay_spans(buffer: Any, spans: list[tuple[int, int, int, int]], ends: list[int],
                 limits: DecodeLimits) -> list[JobState]:
    """Jobs (distinct ids) whose records are ``spans`` of ``buffer`` (offset, length, type,
    schema), each job's in order and ending before its entry of ``ends``: all decoded in one
    ``decode_batch`` call and applied by one reducer, as ``replay_v2`` feeds them (each
    insert's order is the allocator's: checked at replay). A record the fast decoders leave
    is decoded exactly from a copy of its bytes (no view into ``buffer``, which may be a
    map). Returns each job's state."""
    jobs: dict[bytes, JobState] = {}
    reducer = EpochReducer(jobs.get, lambda job, event: jobs.__setitem__(job.id, job),
                           _no_entity)  # no deletion: a held job's is replayed by the engine
    reducer.in_base = False
    decoded = decode_batch(buffer, spans, limits)
    states: list[JobState] = []
    first = 0
    for end in ends:
        job = None
        for index in range(first, end):
            start, length, rtype, schema = spans[index]
            one = decoded[index]
            if (rtype, schema) == MUTATION_PAIR:
                if one is None:
                    one = decode_mutation(buffer[start:start + length], limits)
                if one.availability_order is not None:
                    reducer.next_order = one.availability_order
                job = reducer.mutation(one)
            else:
                job = reducer.event(one if one is not None else
                                    decode_epoch_event(buffer[start:start + length], limits))
        assert job is not None
        states.append(job)
        first = end
    return states


def _no_entity(revision: int, event: Any) -> None:
    raise AssertionError("a tail job's records name no other entity")


class TailRow(JobRow):
    """A completed or cancelled tail job not built yet: ``snapshot`` is its insert's
    payload, ``result`` its (30,2) result payload, ``records`` its start and finish (or
    cancel) payloads and a delayed job's availability payload (None when it was available
    at once; a completed job's revision is then 5, not 4; a cancelled job has no start nor
    result, and its availability only when it came before the cancel); ``attempts`` its
    attempt timeline as replay keeps it."""

    __slots__ = ("records", "attempts")

    def job_state(self) -> JobState:
        return replay_job(self.ordered_records(), self.limits)

    def ordered_records(self) -> list[tuple[bytes, tuple[int, int]]]:
        """The job's payloads and pairs in the order its tail wrote them."""
        started, finished, available = self.records
        if started is None:  # cancelled while it waited
            records = [(self.snapshot, MUTATION_PAIR), (finished, MUTATION_PAIR)]
        else:
            records = [(self.snapshot, MUTATION_PAIR), (started, MUTATION_PAIR),
                       (finished, MUTATION_PAIR), (self.result, EPOCH_EVENT_PAIR)]
            # the finish's expected revision: the result's when the result came first (the
            # engine's order), the start's when the finish did (stores before 2026-12-04)
            if int.from_bytes(finished[17:25], "big") == self.revision - 1:
                records[2:] = records[3], records[2]
        if available is not None:
            records.insert(1, (available, MUTATION_PAIR))
        return records


def tail_job_states(rows: list[TailRow]) -> list[JobState]:
    """``TailRow.job_state`` of many rows (distinct jobs) at once, in their order, through
    ``replay_runs``. A compaction builds every retained job this way, a chunk at a time;
    one row at a time costs a decode and a reducer each."""
    if not rows:
        return []
    limits = rows[0].limits
    if any(row.limits is not limits for row in rows):  # not one recovery's: one by one
        return [row.job_state() for row in rows]
    return replay_runs([row.ordered_records() for row in rows], limits)


def held_row_states(rows: list[Any]) -> list[JobState]:
    """``job_state`` of many rows held as their records (``LiveRow``, ``ScheduledRow``,
    ``FailedRow``, ``RetriedRow``; distinct jobs) at once, in their order, through
    ``replay_runs``: one decode and one reducer for all, where one row at a time costs a
    decode and a reducer each (an operator's bulk retry of a page of failed jobs builds
    each)."""
    if not rows:
        return []
    limits = rows[0].limits
    if any(row.limits is not limits for row in rows):  # not one recovery's: one by one
        return [row.job_state() for row in rows]
    return replay_runs([[(row.snapshot, MUTATION_PAIR)] if isinstance(row, LiveRow)
                        else list(row.records) for row in rows], limits)


def _attempts(row: Any, started_at: int, started: bool) -> tuple | None:
    """The attempt timeline replay keeps for a done tail job: its one attempt to its
    success, or none (None) for a job cancelled while it waited."""
    return ((1, started_at, row.terminal_at, "completed"),) if started else None


def _span(columns: Any, links: Any) -> tuple[int, int]:
    """From the run's first insert payload to the end of its last result or finish payload
    (a job's records start with its insert and end with its finish or its result)."""
    return min(columns[bj.SNAPSHOT::_BJ]), max(
        max(start + length for start, length in zip(columns[bj.RESULT::_BJ],
                                                    columns[bj.RESULT_LENGTH::_BJ])),
        max(start + length for start, length in zip(links[tl.FINISHED::_TL],
                                                    links[tl.FINISHED_LENGTH::_TL])))


class LiveRow:
    """A tail job left available at its insert (revision 1), not built yet: the attributes
    named like ``JobState``'s hold the same values, so bookkeeping that reads only those
    need not build it; ``snapshot`` is the insert's payload (a copy). ``ScheduledRow``:
    a delayed insert's job, waiting for its due time."""

    __slots__ = ("id", "ready_order", "eligible_at", "queue", "task", "definition_length",
                 "args_nodes", "snapshot", "limits")

    state = "available"
    revision = 1
    terminal = False
    terminal_at = None
    result_present = False
    attempts = None
    failure_bytes = 0  # no failure's details (a BaseLiveRow's may have some)

    def job_state(self) -> JobState:
        return replay_job([(self.snapshot, MUTATION_PAIR)], self.limits)


class ScheduledRow(LiveRow):
    """A tail job left scheduled at its delayed insert (revision 1; ``eligible_at`` its due
    time, ``ready_order`` None), not built yet: replay pushed its timer at the insert."""

    __slots__ = ()

    state = "scheduled"


class FailedRow:
    """A tail job a worker failure or a timeout of its first attempt left retryable or
    discarded, not built yet: the attributes named like ``JobState``'s hold the same values
    (``revision`` 4: insert, start, the finish and the details, either way round; 3 for a
    timeout, which has no details; a delayed job's one more, its availability among its
    records); ``records`` its (payload, pair) in the tail's order; the engine installs it
    as replay does at its last record, with ``stamp`` the finish's admin-index stamp,
    ``failure_bytes`` the details' charge, ``attempts`` the timeline replay keeps and
    ``timers`` the timer entries replay pushes for a retryable job (the finish's, and the
    details' when they came after it)."""

    __slots__ = ("id", "state", "revision", "terminal", "terminal_at", "eligible_at", "queue",
                 "task", "definition_length", "args_nodes", "records", "stamp",
                 "failure_bytes", "attempts", "timers", "limits")

    ready_order = None
    result_present = False

    def job_state(self) -> JobState:
        return replay_job(list(self.records), self.limits)


class RetriedRow(FailedRow):
    """A tail job whose first attempt a worker failure left retryable and whose retry then
    succeeded with a nil result, not built yet (revision 8: the first four records, the
    retry's availability, start, result and finish, either way round each): ``records`` its
    eight (payload, pair), ``stamp`` the success's admin-index stamp, ``failure_bytes`` the
    margin replay charges (the details' and the nil result's), ``attempts`` both attempts;
    no timer entry (replay's are stale by its success)."""

    __slots__ = ()

    revision = 8
    result_present = True


def _copies(data: Any, offsets: Any, lengths: Any,
            spans: list[tuple[int, tuple[int, int]]]) -> tuple[tuple[bytes, tuple[int, int]], ...]:
    """Copies of the payloads of the records ``spans`` name, (index, pair) in order (Record
    v1: payload at +24), so that the segment's pages may go."""
    return tuple((bytes(data[offsets[i] + 24:offsets[i] + 24 + lengths[i]]), pair)
                 for i, pair in spans)


def _take_keys(row: Any, data: Any, live: Any, k: int, texts: dict[bytes, str]) -> None:
    """A held row's queue and task (shared texts) and its definition's sizes, from the
    walk's live row at ``live[k:k + TAIL_LIVE]``."""
    row.queue = _text(data, live[k + tl.QUEUE], live[k + tl.QUEUE_LENGTH], texts)
    row.task = _text(data, live[k + tl.WORKER], live[k + tl.WORKER_LENGTH], texts)
    row.definition_length = live[k + tl.DEFINITION_LENGTH]
    row.args_nodes = live[k + tl.ARGS_NODES]


def retried_row(data: Any, offsets: Any, lengths: Any, live: Any, k: int,
                limits: DecodeLimits, texts: dict[bytes, str], stamp: int) -> RetriedRow:
    """The walk's completed row of a retried job at ``live[k:k + TAIL_LIVE]`` (offsets
    absolute in ``data``, Record v1: payload at +24), with copies of its eight payloads;
    ``stamp``: the stamp the walk started from."""
    spans = sorted([(live[k + slot], MUTATION_PAIR) for slot in (
        tl.RECORD, tl.START, tl.FINISH, tl.RETRY, tl.RESTART, tl.COMPLETE)]
        + [(live[k + tl.DETAILS], EPOCH_EVENT_PAIR), (live[k + tl.RESULT], EPOCH_EVENT_PAIR)])
    records = _copies(data, offsets, lengths, spans)
    row = RetriedRow.__new__(RetriedRow)
    row.records = records
    row.state = "completed"
    row.terminal = True
    row.terminal_at = completed_at = live[k + tl.COMPLETE_AT]
    row.id = records[0][0][:16]
    row.eligible_at = None
    _take_keys(row, data, live, k, texts)
    row.stamp = stamp + live[k + tl.COMPLETE_STAMP]
    row.failure_bytes = live[k + tl.FAILURE_BYTES] + live[k + tl.RESULT_BYTES]  # margin
    row.attempts = ((1, live[k + tl.START_AT], live[k + tl.FINISH_AT], "failed"),
                    (2, live[k + tl.RESTART_AT], completed_at, "completed"))
    row.timers = ()
    row.limits = limits
    return row


def failed_row(data: Any, offsets: Any, lengths: Any, live: Any, k: int,
               limits: DecodeLimits, texts: dict[bytes, str], stamp: int) -> FailedRow:
    """The walk's retryable or discarded row at ``live[k:k + TAIL_LIVE]`` (offsets absolute
    in ``data``, Record v1: payload at +24), with copies of its payloads: insert, start,
    finish and details (a timeout has none: DETAILS is its insert's index), and a delayed
    job's availability (AVAILABILITY_RECORD, else its insert's index); ``stamp``: the stamp
    the walk started from."""
    insert, finish, details = live[k + tl.RECORD], live[k + tl.FINISH], live[k + tl.DETAILS]
    available = live[k + tl.AVAILABILITY_RECORD]
    timed_out = details == insert
    spans = [(insert, MUTATION_PAIR), (live[k + tl.START], MUTATION_PAIR),
             (finish, MUTATION_PAIR)]
    if not timed_out:
        spans.append((details, EPOCH_EVENT_PAIR))
    if available != insert:
        spans.append((available, MUTATION_PAIR))
    records = _copies(data, offsets, lengths, sorted(spans))
    row = FailedRow.__new__(FailedRow)
    row.revision = last = len(records)  # one revision per record
    row.records = records
    discarded = live[k + tl.STATE] == tl.DISCARDED
    finished_at = live[k + tl.FINISH_AT]
    row.state = "discarded" if discarded else "retryable"
    row.terminal = discarded
    row.terminal_at = finished_at if discarded else None
    row.id = job_id = records[0][0][:16]
    due = live[k + tl.ELIGIBLE_AT]
    row.eligible_at = None if discarded else due
    _take_keys(row, data, live, k, texts)
    row.stamp = stamp + live[k + tl.FINISH_STAMP]
    row.failure_bytes = live[k + tl.FAILURE_BYTES]
    # tay.engine.state.finish_outcome
    outcome = "discarded" if discarded else "timed_out" if timed_out else "failed"
    row.attempts = ((1, live[k + tl.START_AT], finished_at, outcome),)
    # every install of a job waiting for time pushes its timer: the finish's at the
    # revision before the last when the details follow it (at the last), else the finish's
    # alone at the last (a timeout's: no details)
    if discarded:
        row.timers = ()
    elif finish < details:
        row.timers = ((due, (job_id, last - 1)), (due, (job_id, last)))
    else:
        row.timers = ((due, (job_id, last)),)
    row.limits = limits
    return row


class ExecutingRow:
    """A tail job left executing its first attempt at its start, built already (``job``:
    its insert and start replayed, ``replay_jobs``): the engine installs it as replay
    would after the start, with ``stamp`` the admin-index stamp replay gives the start;
    its definition's sizes are the walk's (the args need no second walk)."""

    __slots__ = ("job", "stamp", "definition_length", "args_nodes")


def executing_rows(data: Any, offsets: Any, lengths: Any, live: Any, at: list[int],
                   limits: DecodeLimits, stamp: int) -> list[ExecutingRow]:
    """The walk's executing rows at ``live[k:k + TAIL_LIVE]`` for ``k`` in ``at``, their
    jobs built in one batch from the insert and start records in ``data`` (offsets
    absolute, Record v1: payload at +24); ``stamp``: the stamp the walk started from."""
    spans = []
    for k in at:
        insert, started = live[k + tl.RECORD], live[k + tl.START]
        spans.append(((offsets[insert] + 24, lengths[insert]),
                      (offsets[started] + 24, lengths[started])))
    rows = []
    for k, job in zip(at, replay_jobs(data, spans, limits)):
        row = ExecutingRow.__new__(ExecutingRow)
        row.job = job
        row.stamp = stamp + live[k + tl.START_STAMP]
        row.definition_length = live[k + tl.DEFINITION_LENGTH]
        row.args_nodes = live[k + tl.ARGS_NODES]
        rows.append(row)
    return rows


def live_row(data: Any, offsets: Any, lengths: Any, live: Any, k: int,
             limits: DecodeLimits, texts: dict[bytes, str]) -> LiveRow:
    """The walk's live row at ``live[k:k + TAIL_LIVE]`` of a job left available or
    scheduled (``ScheduledRow``) at its insert (offsets absolute in ``data``, Record v1:
    payload at +24), with a copy of its insert payload, so the segment's pages may go."""
    index = live[k + tl.RECORD]
    start = offsets[index] + 24
    scheduled = live[k + tl.STATE] == tl.SCHEDULED
    row = ScheduledRow.__new__(ScheduledRow) if scheduled else LiveRow.__new__(LiveRow)
    row.snapshot = snapshot = bytes(data[start:start + lengths[index]])
    row.id = snapshot[:16]
    row.ready_order = None if scheduled else live[k + tl.ORDER]
    row.eligible_at = live[k + tl.ELIGIBLE_AT]
    # written out, not _take_keys: once per held job of a backlog
    row.queue = _text(data, live[k + tl.QUEUE], live[k + tl.QUEUE_LENGTH], texts)
    row.task = _text(data, live[k + tl.WORKER], live[k + tl.WORKER_LENGTH], texts)
    row.definition_length = live[k + tl.DEFINITION_LENGTH]
    row.args_nodes = live[k + tl.ARGS_NODES]
    row.limits = limits
    return row


def _text(data: Any, start: int, length: int, texts: dict[bytes, str]) -> str:
    raw = bytes(data[start:start + length])
    text = texts.get(raw)
    if text is None:
        text = texts[raw] = raw.decode("utf-8")
    return text


class TailJobs(BaseJobs):
    """Done jobs of one tail run (``tay._native.tail_jobs``): ``BASE_JOB`` columns and
    ``TAIL_LINK`` links per job, offsets in ``data`` plus ``origin``; ``row(k)`` is job
    ``k``'s ``TailRow``. ``held`` keeps the ids and keys and reads the records from the
    segment (``source``) when asked, or copies the run's bytes without a source."""

    __slots__ = ("links",)

    def __init__(self, data: Any, columns: Any, links: Any, limits: DecodeLimits,
                 origin: int = 0, source: BaseSource | None = None) -> None:
        super().__init__(data, columns, limits, origin, source)
        self.links = links

    def held(self, texts: dict[bytes, str]) -> "TailJobs | HeldTailJobs":
        columns, origin = self.columns, self.origin
        if self.source is not None:
            return HeldTailJobs(self.source, array("Q", columns), array("Q", self.links),
                                self.ids(), self.keys(bj.QUEUE, texts),
                                self.keys(bj.WORKER, texts), self.limits)
        low, high = _span(columns, self.links)
        return TailJobs(bytes(self.data[low - origin:high - origin]), columns, self.links,
                        self.limits, low)

    def stamps(self) -> Any:
        """Each job's state changes from the run's start up to its finish (ascending)."""
        return self.links[tl.STAMP::_TL]

    def row(self, k: int, texts: dict[bytes, str]) -> TailRow:
        data, columns, links, origin = self.data, self.columns, self.links, self.origin
        base, link = k * _BJ, k * _TL
        row = TailRow.__new__(TailRow)
        start = columns[base + bj.SNAPSHOT] - origin
        row.snapshot = data[start:start + columns[base + bj.SNAPSHOT_LENGTH]]
        row.id = row.snapshot[:16]
        row.state = self.state(k)  # completed or cancelled
        row.revision = columns[base + bj.REVISION]
        row.terminal_at = columns[base + bj.TERMINAL_AT]
        row.queue = self.text(k, bj.QUEUE, texts)
        row.task = self.text(k, bj.WORKER, texts)
        row.definition_length = columns[base + bj.DEFINITION_LENGTH]
        row.args_nodes = columns[base + bj.ARGS_NODES]
        row.result, row.result_bytes = attached(data, columns, base + bj.RESULT, origin)
        # none: a tail job done in columns succeeded at its first attempt or was cancelled
        row.failure, row.failure_bytes = attached(data, columns, base + bj.FAILURE, origin)
        row.limits = self.limits
        length = links[link + tl.STARTED_LENGTH]
        start = links[link + tl.STARTED] - origin
        started = data[start:start + length] if length else None
        start = links[link + tl.FINISHED] - origin
        finished = data[start:start + links[link + tl.FINISHED_LENGTH]]
        start = links[link + tl.AVAILABILITY] - origin
        length = links[link + tl.AVAILABILITY_LENGTH]
        row.records = (started, finished, data[start:start + length] if length else None)
        row.attempts = _attempts(row, links[link + tl.STARTED_AT], started is not None)
        return row

    def job_rows(self, first: int = 0, end: int | None = None,
                 texts: dict[bytes, str] | None = None) -> Iterator[JobRow]:
        texts = {} if texts is None else texts
        for k in range(first, len(self) if end is None else end):
            yield self.row(k, texts)


class HeldTailJobs(HeldJobs):
    """A tail run as an engine keeps it: columns, links, ids and keys in memory, each
    job's four records read from the segment when its row is asked for (``BaseSource``:
    checked, or ``StorageFailure``), or from one copy of the run's bytes after ``load``."""

    __slots__ = ("links",)

    def __init__(self, source: BaseSource, columns: Any, links: Any, ids: list[bytes],
                 queues: list[str], workers: list[str], limits: DecodeLimits) -> None:
        super().__init__(source, columns, ids, queues, workers, limits)
        self.links = links

    def stamps(self) -> Any:
        return self.links[tl.STAMP::_TL]

    def _span(self) -> tuple[int, int]:
        # jobs are in finish order: the first insert and the last result may be any job's
        return _span(self.columns, self.links)

    _ROW = TailRow
    _SNAPSHOT_PAIR = MUTATION_PAIR  # the insert
    _RESULT_PAIR = EPOCH_EVENT_PAIR

    def row(self, k: int, texts: dict[bytes, str] | None = None) -> TailRow:
        """``HeldJobs.row`` (the insert and the result, checked as a base's), with the start
        and finish payloads and the attempt timeline replay keeps."""
        row = super().row(k)
        links, link = self.links, k * _TL
        length, started = links[link + tl.AVAILABILITY_LENGTH], links[link + tl.STARTED_LENGTH]
        row.records = (self._payload(links[link + tl.STARTED], started, MUTATION_PAIR)
                       if started else None,
                       self._payload(links[link + tl.FINISHED],
                                     links[link + tl.FINISHED_LENGTH], MUTATION_PAIR),
                       self._payload(links[link + tl.AVAILABILITY], length, MUTATION_PAIR)
                       if length else None)
        row.attempts = _attempts(row, links[link + tl.STARTED_AT], bool(started))
        return row  # type: ignore[return-value]


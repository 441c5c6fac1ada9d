"""Terminal base jobs kept as their records until first use (a restart's compact rows).

Most of a compacted base is finished jobs that a restart only counts, charges and indexes.
Replay through the fast path (``tay.storage.v2.fast``, for a consumer that offers
``epoch_install_row``) keeps each such job as a ``JobRow``: its (7,1) snapshot payload,
the payloads of its (31,2) attachments (a result; the columnar walk also takes a failure's
details), and the handful of fields the engine's bookkeeping reads (state, revision,
terminal time, keys, sizes, the attachments' charges). ``job_state()`` builds the
``JobState`` the eager path would have built, from the same bytes with the same decoders,
when something first reads the job.

Every record is still checked at replay (the native scans vouch for each payload; the
reducer checks order and attachment rules on the row's fields), and whatever a row cannot
decide (an attachment that would be refused; in the record-by-record fast path, a
failure's details) makes the reducer
materialise the job and take the exact path, so refusals keep their class and reason.
"""

from __future__ import annotations

import os
from array import array
from typing import Any, Iterator, Sequence

from tay import _native
from tay.failures import RecoveryRefused, StorageFailure
from tay._native import _pure_base as bj
from tay._native import _pure_events as er
from tay._native import _pure_snapshots as sr
from tay.storage.events import Event
from tay.storage.events.definition import LazyDefinition
from tay.storage.events.fast import decode_event, decode_events
from tay.storage.events.transitions import JobState, attach
from tay.storage.formats.record import FIXED_SIZE, HEADER_SIZE, MAX_PAYLOAD, decode_record
from tay.storage.formats.value import DecodeLimits
from tay.storage.v2.jobs import job_of
from tay.storage.v2.records import decode_snapshot

_STATES = sr.STATES
_D = sr.DEFINITION  # where the definition's Event-v1 slots start in a snapshot row
_FEW_KEYS = 64  # distinct keys in a run that base_keys tells apart (more: sliced one by one)


class ResultRow:
    """A (31,2) attachment carrying a result, as the scan vouched for it (not decoded)."""

    __slots__ = ("payload", "job_id", "expected_revision", "result_bytes", "limits")

    def __init__(self, payload: bytes, job_id: bytes, expected_revision: int,
                 result_bytes: int, limits: DecodeLimits) -> None:
        self.payload = payload  # the whole (31,2) payload: inner pair, then the event
        self.job_id = job_id
        self.expected_revision = expected_revision
        self.result_bytes = result_bytes  # the result's canonical Value size
        self.limits = limits

    def event(self) -> Event:
        """The attachment's inner event, as the fast path decodes it."""
        return _attachment_event(self.payload, self.limits)


def _attachment_event(payload: bytes, limits: DecodeLimits) -> Event:
    return decode_event(payload[0], payload[1], memoryview(payload)[2:], limits)


class JobRow:
    """A terminal base job not built yet. The attributes named like ``JobState``'s hold the
    same values, so bookkeeping that reads only those need not build the job."""

    __slots__ = ("id", "state", "revision", "terminal_at", "queue", "task",
                 "definition_length", "args_nodes", "snapshot", "result", "result_bytes",
                 "failure", "failure_bytes", "limits")

    terminal = True
    ready_order = None  # a terminal snapshot carries no availability order
    attempts = None  # a base job's attempt timeline starts empty (a tail row's does not)

    def __init__(self, job_id: bytes, state: str, revision: int, terminal_at: int | None,
                 queue: str, task: str, definition_length: int, args_nodes: int,
                 snapshot: bytes, limits: DecodeLimits) -> None:
        self.id = job_id
        self.state = state
        self.revision = revision
        self.terminal_at = terminal_at
        self.queue = queue
        self.task = task
        self.definition_length = definition_length
        self.args_nodes = args_nodes
        self.snapshot = snapshot  # the (7,1) payload
        self.result: bytes | None = None  # the (31,2) payload of its result, if any
        self.result_bytes = 0  # the result's canonical Value size
        self.failure: bytes | None = None  # the (31,2) payload of its failure's details
        self.failure_bytes = 0  # their charge (tay.engine.state.failure_bytes)
        self.limits = limits

    @property
    def result_present(self) -> bool:
        return self.result is not None

    def take(self, attachment: ResultRow) -> bool:
        """Load ``attachment`` if ``attach`` would without a refusal; else False."""
        if (self.state == "completed" and self.result is None
                and attachment.job_id == self.id
                and attachment.expected_revision == self.revision):
            self.result = attachment.payload
            self.result_bytes = attachment.result_bytes
            return True
        return False

    def job_state(self) -> JobState:
        """The job with its attachments, exactly as the eager replay builds it."""
        job = snapshot_state(self.snapshot, self.limits)
        if self.result is not None:
            job = attach(job, _attachment_event(self.result, self.limits))
        if self.failure is not None:
            job = attach(job, _attachment_event(self.failure, self.limits))
        return job


class BaseLiveRow:
    """A live base job not built yet: a waiting snapshot (available, scheduled or
    retryable, with its due time) that the columnar replay took with at most its failure's
    details. The attributes named like ``JobState``'s hold the same values, so bookkeeping
    that reads only those need not build it; ``snapshot`` is the (7,1) payload and
    ``failure`` the details' (31,2) payload or None (copies, so the segment's pages may
    go), ``failure_bytes`` their charge."""

    __slots__ = ("id", "state", "revision", "ready_order", "eligible_at", "queue", "task",
                 "definition_length", "args_nodes", "snapshot", "failure", "failure_bytes",
                 "limits")

    terminal = False
    terminal_at = None
    result_present = False
    attempts = None  # a base job's attempt timeline starts empty

    def job_state(self) -> JobState:
        job = snapshot_state(self.snapshot, self.limits)
        if self.failure is not None:
            job = attach(job, _attachment_event(self.failure, self.limits))
        return job


def base_live_rows(data: Any, live: Any, limits: DecodeLimits,
                   texts: dict[bytes, str]) -> list[BaseLiveRow]:
    """The ``BaseLiveRow`` of each live job of a ``base_jobs`` walk (``live``: its
    ``BASE_LIVE`` rows, offsets absolute in ``data``, the mapped segment: its slices are
    copies); ``texts``: the keys decoded so far."""
    rows = []
    states = _STATES
    new = BaseLiveRow.__new__
    for k in range(0, len(live), bj.BASE_LIVE):
        start = live[k + bj.LIVE_SNAPSHOT]
        row = new(BaseLiveRow)
        row.snapshot = snapshot = bytes(data[start:start + live[k + bj.LIVE_SNAPSHOT_LENGTH]])
        row.id = snapshot[:16]
        row.state = states[live[k + bj.LIVE_STATE]]
        row.revision = live[k + bj.LIVE_REVISION]
        row.ready_order = live[k + bj.ORDER] if live[k + bj.HAS_ORDER] else None
        row.eligible_at = live[k + bj.ELIGIBLE_AT]
        start = live[k + bj.LIVE_QUEUE]
        row.queue = _decoded(bytes(data[start:start + live[k + bj.LIVE_QUEUE_LENGTH]]), texts)
        start = live[k + bj.LIVE_WORKER]
        row.task = _decoded(bytes(data[start:start + live[k + bj.LIVE_WORKER_LENGTH]]), texts)
        row.definition_length = live[k + bj.LIVE_DEFINITION_LENGTH]
        row.args_nodes = live[k + bj.LIVE_ARGS_NODES]
        row.failure, row.failure_bytes = attached(data, live, k + bj.LIVE_FAILURE, 0)
        row.limits = limits
        rows.append(row)
    return rows


class BaseReadFailed(StorageFailure):
    """A finished job's bytes could not be read back from the base (an I/O error, or bytes
    that are no longer the records replay checked): what asked for them is refused."""

    def __init__(self, reason: str, path: str | None, offset: int, **extra: Any) -> None:
        super().__init__("physical_corruption", reason, path=path, offset=offset,
                         stage="base_read", **extra)


class BaseSource:
    """A base segment, open for reading the finished jobs an engine keeps in columns
    (``HeldJobs``) after replay unmapped it. Every read is checked again as replay checked
    it (the frame's CRCs, its pair and length), so a read that fails or finds other bytes
    raises ``StorageFailure`` (stage ``base_read``) and returns nothing. The descriptor is
    closed when the last run holding it lets go (``HeldJobs.load`` copies a run's bytes
    first: a compaction does so before it reclaims the old base)."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str, inode: int) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_ino != inode:  # not the file recovery hashed and scanned
                raise RecoveryRefused("discovery", "base_segment_replaced", path=path,
                                      stage="replay")
        except BaseException:
            os.close(fd)
            raise
        self.path = path
        self.fd = fd

    def __del__(self) -> None:
        fd = getattr(self, "fd", -1)
        if fd >= 0:
            self.fd = -1
            os.close(fd)

    def read(self, start: int, end: int) -> bytes:
        """The frames from ``start`` to ``end`` (whole records), checked, as one buffer."""
        try:
            buf = os.pread(self.fd, end - start, start)
        except OSError as error:
            raise BaseReadFailed("base_read_failed", self.path, start,
                                 error=str(error)) from None
        # the frames' CRCs and their sequence run, checked in C (a run has ~1,000 of them)
        first = int.from_bytes(buf[8:16], "big") if len(buf) >= HEADER_SIZE else 0
        records, _, stop = _native.scan_records(buf, 0, len(buf), MAX_PAYLOAD, first) \
            if first else ((), 0, "not_record")
        if stop != "end" or not records:
            raise BaseReadFailed(f"base_read_{stop}", self.path, start)
        return buf

    def payload(self, offset: int, length: int, pair: tuple[int, int]) -> bytes:
        """The payload of the record whose payload starts at ``offset``, checked."""
        start = offset - HEADER_SIZE
        try:
            buf = os.pread(self.fd, length + FIXED_SIZE, start)
        except OSError as error:
            raise BaseReadFailed("base_read_failed", self.path, start,
                                 error=str(error)) from None
        try:
            record = decode_record(buf)
        except StorageFailure as failure:
            raise BaseReadFailed(failure.reason, self.path, start) from None
        if (record.type, record.schema) != pair or len(record.payload) != length:
            raise BaseReadFailed("base_record_changed", self.path, start)
        return record.payload


class _JobColumns:
    """The per-job readers over ``columns`` (``BASE_JOB`` ints per job) that ``BaseJobs``
    and ``HeldJobs`` share."""

    __slots__ = ()
    columns: Any

    def state(self, k: int) -> str:
        return _STATES[self.columns[k * _BJ + bj.STATE]]

    def revision(self, k: int) -> int:
        return self.columns[k * _BJ + bj.REVISION]

    def terminal_at(self, k: int) -> int:
        return self.columns[k * _BJ + bj.TERMINAL_AT]


class BaseJobs(_JobColumns):
    """Finished base jobs a columnar replay took whole (``tay._native.base_jobs``): its
    rows (``BASE_JOB`` ints per job, offsets in ``data`` plus ``origin``) over the segment's
    bytes, read while the segment is still mapped, or over a copy of just the run's bytes
    (``held`` without a ``source``). ``job_rows()`` gives the ``JobRow`` of each, the same
    row the record-by-record fast path builds (its result taken); ``row(k)`` the row of job
    ``k``. ``source``: the segment, for ``held`` to read from later instead of a copy."""

    __slots__ = ("data", "columns", "limits", "origin", "source")

    def __init__(self, data: Any, columns: Any, limits: DecodeLimits, origin: int = 0,
                 source: BaseSource | None = None) -> None:
        self.data = data  # slicing gives bytes (an mmap or bytes)
        self.columns = columns
        self.limits = limits
        self.origin = origin  # the segment offset of data[0]
        self.source = source

    def __len__(self) -> int:
        return len(self.columns) // _BJ

    @property
    def last_id(self) -> bytes:
        return self.job_id(len(self) - 1)

    def held(self, texts: dict[bytes, str]) -> "BaseJobs | HeldJobs":
        """What an engine keeps of the run after the segment is unmapped: its columns in an
        array (8 bytes an integer), its ids and keys, and the snapshots and results read
        from ``source`` when asked (``HeldJobs``); without a source, the same jobs over one
        copy of the run's own bytes (records are in order: the first job's snapshot starts
        them, the last job's snapshot or result ends them). ``texts``: the keys decoded so
        far (queue and worker keys repeat: one str each)."""
        columns = self.columns
        if self.source is not None:
            return HeldJobs(self.source, array("Q", columns), self.ids(),
                            self.keys(bj.QUEUE, texts), self.keys(bj.WORKER, texts),
                            self.limits)
        low, high = _span(columns)
        origin = self.origin
        return BaseJobs(self.data[low - origin:high - origin], array("Q", columns),
                        self.limits, low)

    def job_id(self, k: int) -> bytes:
        start = self.columns[k * _BJ + bj.SNAPSHOT] - self.origin
        return bytes(self.data[start:start + 16])

    def ids(self) -> list[bytes]:
        """Every job's id, in order (ascending)."""
        return _native.base_ids(self.data, self.columns, self.origin)

    def texts(self, slot: int) -> list[bytes]:
        """Every job's queue (``bj.QUEUE``) or worker (``bj.WORKER``) key, undecoded."""
        data, columns, origin = self.data, self.columns, self.origin
        return [data[start - origin:start - origin + length] for start, length in
                zip(columns[slot::_BJ], columns[slot + 1::_BJ])]

    def keys(self, slot: int, texts: dict[bytes, str]) -> list[str]:
        """Every job's queue (``bj.QUEUE``) or worker (``bj.WORKER``) key, decoded."""
        found = _native.base_keys(self.data, self.columns, self.origin, slot, _FEW_KEYS)
        if found is None:  # many distinct keys: slice each
            return [_decoded(raw, texts) for raw in self.texts(slot)]
        index, raws = found  # a run has few distinct keys: one str each
        return list(map([_decoded(raw, texts) for raw in raws].__getitem__, index))

    def text(self, k: int, slot: int, texts: dict[bytes, str]) -> str:
        """Job ``k``'s queue or worker key (``texts``: the ones decoded so far)."""
        base = k * _BJ + slot
        start = self.columns[base] - self.origin
        raw = self.data[start:start + self.columns[base + 1]]
        text = texts.get(raw)
        if text is None:
            text = texts[raw] = raw.decode("utf-8")
        return text

    def row(self, k: int, texts: dict[bytes, str]) -> JobRow:
        """Job ``k``'s ``JobRow``, as ``job_rows`` gives it."""
        return next(self.job_rows(k, k + 1, texts))

    def job_rows(self, first: int = 0, end: int | None = None,
                 texts: dict[bytes, str] | None = None) -> Iterator[JobRow]:
        data, columns, limits, origin = self.data, self.columns, self.limits, self.origin
        if texts is None:
            texts = {}  # queue and worker keys repeat: one str each
        states = _STATES
        new = JobRow.__new__
        stop = len(columns) if end is None else end * _BJ
        for base in range(first * _BJ, stop, _BJ):
            start = columns[base + 1] - origin  # bj.SNAPSHOT, then its length, state, ...
            snapshot = data[start:start + columns[base + 2]]
            start = columns[base + 6] - origin
            raw = data[start:start + columns[base + 7]]
            queue = texts.get(raw)
            if queue is None:
                queue = texts[raw] = raw.decode("utf-8")
            start = columns[base + 8] - origin
            raw = data[start:start + columns[base + 9]]
            task = texts.get(raw)
            if task is None:
                task = texts[raw] = raw.decode("utf-8")
            row = new(JobRow)
            row.id = snapshot[:16]
            row.state = states[columns[base + 3]]
            row.revision = columns[base + 4]
            row.terminal_at = columns[base + 5]
            row.queue = queue
            row.task = task
            row.definition_length = columns[base + 10]
            row.args_nodes = columns[base + 11]
            row.snapshot = snapshot
            row.limits = limits
            row.result, row.result_bytes = attached(data, columns, base + 12, origin)
            row.failure, row.failure_bytes = attached(data, columns, base + 15, origin)
            yield row


def attached(data: Any, columns: Any, slot: int, origin: int) -> tuple[Any, int]:
    """The payload and charge of the attachment whose offset, length and charge columns
    start at ``slot`` (``bj.RESULT`` or ``bj.FAILURE`` of a job, ``bj.LIVE_FAILURE`` of a
    live one): (None, 0) for none."""
    length = columns[slot + 1]
    if not length:
        return None, 0
    start = columns[slot] - origin
    return data[start:start + length], columns[slot + 2]


def _decoded(raw: bytes, texts: dict[bytes, str]) -> str:
    text = texts.get(raw)
    if text is None:
        text = texts[raw] = raw.decode("utf-8")
    return text


def _span(columns: Any) -> tuple[int, int]:
    """The segment offsets from the run's first payload to its last payload's end."""
    last = len(columns) - _BJ
    return columns[bj.SNAPSHOT], max(
        columns[last + bj.SNAPSHOT] + columns[last + bj.SNAPSHOT_LENGTH],
        columns[last + bj.RESULT] + columns[last + bj.RESULT_LENGTH],
        columns[last + bj.FAILURE] + columns[last + bj.FAILURE_LENGTH])


class HeldJobs(_JobColumns):
    """A run of finished base jobs as an engine keeps it (``BaseJobs.held``): columns, ids,
    queue and worker keys in memory; each job's snapshot and result read from the base
    segment when its row is asked for (``BaseSource``: checked, or ``StorageFailure``), or
    from one copy of the run's bytes once ``load`` took it. Same readers as ``BaseJobs``."""

    __slots__ = ("source", "columns", "_ids", "_queues", "_workers", "limits", "data",
                 "origin")

    def __init__(self, source: BaseSource, columns: Any, ids: list[bytes], queues: list[str],
                 workers: list[str], limits: DecodeLimits) -> None:
        self.source: BaseSource | None = source
        self.columns = columns
        self._ids = ids
        self._queues = queues
        self._workers = workers
        self.limits = limits
        self.data: bytes | None = None  # the run's frames, once loaded
        self.origin = 0  # the segment offset of data[0]

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def last_id(self) -> bytes:
        return self._ids[-1]

    def job_id(self, k: int) -> bytes:
        return self._ids[k]

    def ids(self) -> list[bytes]:
        return list(self._ids)

    def keys(self, slot: int, texts: dict[bytes, str] | None = None) -> list[str]:
        return self._queues if slot == bj.QUEUE else self._workers

    def text(self, k: int, slot: int, texts: dict[bytes, str] | None = None) -> str:
        return (self._queues if slot == bj.QUEUE else self._workers)[k]

    def load(self) -> None:
        """Copy the run's frames (checked) so nothing reads the segment any more. A worker
        thread may load while the loop reads rows: ``origin`` is set before ``data``, which
        readers test first, and ``source`` is dropped last."""
        if self.data is not None:
            return
        low, high = self._span()
        start = low - HEADER_SIZE
        data = self.source.read(start, high + FIXED_SIZE - HEADER_SIZE)  # type: ignore[union-attr]
        self.origin = start
        self.data = data
        self.source = None

    def _span(self) -> tuple[int, int]:
        """The segment offsets from the run's first payload to its last payload's end."""
        return _span(self.columns)

    def _payload(self, offset: int, length: int, pair: tuple[int, int]) -> bytes:
        data = self.data
        if data is not None:
            start = offset - self.origin
            return data[start:start + length]
        return self.source.payload(offset, length, pair)  # type: ignore[union-attr]

    # what a row is built as and the pairs its payloads are read (and checked) as: a base's
    # snapshot and (31,2) result; a tail run (tay.storage.v2.tail) has its own
    _ROW: type[JobRow] = JobRow
    _SNAPSHOT_PAIR = (7, 1)
    _RESULT_PAIR = (31, 2)

    def row(self, k: int, texts: dict[bytes, str] | None = None) -> JobRow:
        columns = self.columns
        base = k * _BJ
        snapshot = self._payload(columns[base + bj.SNAPSHOT],
                                 columns[base + bj.SNAPSHOT_LENGTH], self._SNAPSHOT_PAIR)
        if snapshot[:16] != self._ids[k]:
            raise BaseReadFailed("base_record_changed",
                                 None if self.source is None else self.source.path,
                                 columns[base + bj.SNAPSHOT] - HEADER_SIZE)
        row = self._ROW.__new__(self._ROW)
        row.id = self._ids[k]
        row.state = _STATES[columns[base + bj.STATE]]
        row.revision = columns[base + bj.REVISION]
        row.terminal_at = columns[base + bj.TERMINAL_AT]
        row.queue = self._queues[k]
        row.task = self._workers[k]
        row.definition_length = columns[base + bj.DEFINITION_LENGTH]
        row.args_nodes = columns[base + bj.ARGS_NODES]
        row.snapshot = snapshot
        row.limits = self.limits
        row.result, row.result_bytes = self._attached(base + bj.RESULT, self._RESULT_PAIR)
        # a base's failure details: a (31,2) as its result is (a tail run's are none)
        row.failure, row.failure_bytes = self._attached(base + bj.FAILURE, (31, 2))
        return row

    def _attached(self, slot: int, pair: tuple[int, int]) -> tuple[bytes | None, int]:
        """``attached`` read through ``_payload`` (checked as ``pair``)."""
        columns = self.columns
        length = columns[slot + 1]
        if not length:
            return None, 0
        return self._payload(columns[slot], length, pair), columns[slot + 2]

    def job_rows(self, first: int = 0, end: int | None = None,
                 texts: dict[bytes, str] | None = None) -> Iterator[JobRow]:
        for k in range(first, len(self) if end is None else end):
            yield self.row(k)


_BJ = bj.BASE_JOB
assert (bj.SNAPSHOT, bj.SNAPSHOT_LENGTH, bj.STATE, bj.REVISION, bj.TERMINAL_AT, bj.QUEUE,
        bj.QUEUE_LENGTH, bj.WORKER, bj.WORKER_LENGTH, bj.DEFINITION_LENGTH, bj.ARGS_NODES,
        bj.RESULT, bj.RESULT_LENGTH, bj.RESULT_BYTES, bj.FAILURE, bj.FAILURE_LENGTH,
        bj.FAILURE_BYTES) == tuple(range(1, 18))
# attached() reads a live row's details as a finished row's: offset, length, charge in turn
assert (bj.LIVE_FAILURE_LENGTH, bj.LIVE_FAILURE_BYTES) == (bj.LIVE_FAILURE + 1, bj.LIVE_FAILURE + 2)


def result_row(payload: bytes, rows: list[int], base: int, inner_offset: int,
               limits: DecodeLimits) -> ResultRow:
    """The row of a (31,2) result attachment the events scan vouched for (``rows[base:]``
    is its Event-v1 row; ``inner_offset``: where the event starts in ``payload``)."""
    job_id = rows[base + er.JOB_ID] + inner_offset
    return ResultRow(payload, payload[job_id:job_id + 16], rows[base + er.EXPECTED],
                     rows[base + er.B], limits)


# ---- from a snapshot scan row: the JobState, or the JobRow --------------------------------

def snapshot_state(data: bytes, limits: DecodeLimits) -> JobState:
    """``job_of(decode_snapshot(data))``, through the fast path when the scan vouches for
    ``data`` (a ``JobRow`` being built: the scan did at replay, with these limits)."""
    rows = _native.snapshots_scan(data, [(0, len(data))], limits.depth, limits.nodes,
                                  limits.binary)
    if rows[0] == er.EVENT_FAST:
        return snapshot_job(data, rows, 0, {})
    return job_of(decode_snapshot(data, limits))


def joined(payloads: list[Any]) -> tuple[bytes, list[int]]:
    """``payloads`` in one buffer, for one native call over all of them, and where each
    starts in it."""
    starts = []
    offset = 0
    for payload in payloads:
        starts.append(offset)
        offset += len(payload)
    return b"".join(payloads), starts


def row_states(rows: Sequence[JobRow | BaseLiveRow]) -> list[JobState]:
    """``row.job_state()`` of many rows at once, in their order: every snapshot in one
    native scan and every attachment in one decode. A compaction builds each held job
    twice (to write the base, then to compare its replay); one at a time, the calls around
    each scan cost more than the scans."""
    if not rows:
        return []
    limits = rows[0].limits
    if any(row.limits is not limits for row in rows):  # not one recovery's: one by one
        return [row.job_state() for row in rows]
    snapshots = [row.snapshot for row in rows]
    buffer, starts = joined(snapshots)
    # the scan's slots are offsets within each payload, so each job reads its own bytes
    scanned = _native.snapshots_scan(
        buffer, [(start, len(snapshot)) for start, snapshot in zip(starts, snapshots)],
        limits.depth, limits.nodes, limits.binary)
    texts: dict[bytes, str] = {}  # queue and worker keys repeat: one str each
    jobs = []
    base = 0
    for snapshot in snapshots:
        jobs.append(snapshot_job(snapshot, scanned, base, texts)
                    if scanned[base] == er.EVENT_FAST
                    else job_of(decode_snapshot(snapshot, limits)))
        base += sr.SNAPSHOT_ROW
    # the attachments as ``job_state`` makes them: a result, then a failure's details
    owners: list[int] = []
    payloads: list[bytes] = []
    for k, row in enumerate(rows):
        result = row.result if type(row) is JobRow else None
        if result is not None:
            owners.append(k)
            payloads.append(result)
        if row.failure is not None:
            owners.append(k)
            payloads.append(row.failure)
    if payloads:
        buffer, starts = joined(payloads)
        # each (31,2) payload: its inner pair, then the event
        records = [(start + 2, len(payload) - 2, payload[0], payload[1])
                   for start, payload in zip(starts, payloads)]
        for k, event in zip(owners, decode_events(buffer, records, limits)):
            jobs[k] = attach(jobs[k], event)
    return jobs


def job_row(data: bytes, rows: list[int], base: int, texts: dict[bytes, str],
            limits: DecodeLimits) -> JobRow:
    """The row of a terminal snapshot the scan vouched for (``rows[base:]``)."""
    d = base + _D
    terminal_at = None if (rows[base + sr.NIL] >> sr.TERMINAL_AT) & 1 \
        else rows[base + sr.TERMINAL_AT]
    return JobRow(data[:16], _STATES[rows[base + sr.STATE]], rows[base + sr.REVISION],
                  terminal_at, _text(data, rows, d + er.QUEUE, texts),
                  _text(data, rows, d + er.WORKER, texts), rows[d + er.DEFINITION_LENGTH],
                  rows[d + er.ARGS_NODES], data, limits)


def _text(data: bytes, rows: list[int], slot: int, texts: dict[bytes, str]) -> str:
    start = rows[slot]
    raw = data[start:start + rows[slot + 1]]
    text = texts.get(raw)
    if text is None:
        text = texts[raw] = raw.decode("utf-8")
    return text


def snapshot_job(data: bytes, rows: list[int], base: int, texts: dict[bytes, str]) -> JobState:
    """``job_of(decode_snapshot(payload))`` for a payload the scan vouched for."""
    nil = rows[base + sr.NIL]
    d = base + _D

    def opt(slot: int) -> int | None:
        return None if (nil >> slot) & 1 else rows[base + slot]

    start = rows[d + er.DEFINITION]
    canonical = data[start:start + rows[d + er.DEFINITION_LENGTH]]
    args = rows[d + er.ARGS] - start
    scheduled = None if (rows[d + er.NIL] >> er.SCHEDULED_AT) & 1 else rows[d + er.SCHEDULED_AT]
    definition = LazyDefinition(
        canonical, (args, args + rows[d + er.ARGS_LENGTH]), rows[d + er.ARGS_NODES],
        rows[d + er.MAX_ATTEMPTS], _text(data, rows, d + er.QUEUE, texts), scheduled,
        rows[d + er.TIMEOUT_MS], _text(data, rows, d + er.WORKER, texts))
    diagnostic = None if (nil >> sr.DIAGNOSTIC) & 1 else \
        {"code": rows[base + sr.DIAGNOSTIC], "version": 1}
    return JobState(data[:16], definition, canonical, _STATES[rows[base + sr.STATE]],
                    rows[base + sr.REVISION], rows[base + sr.ATTEMPT], opt(sr.NEXT_ATTEMPT),
                    rows[base + sr.CYCLE], opt(sr.EXECUTION), opt(sr.ELIGIBLE_AT),
                    opt(sr.ORDER), rows[base + sr.INSERTED_AT], opt(sr.ATTEMPTED_AT),
                    opt(sr.COMPLETED_AT), opt(sr.TERMINAL_AT), diagnostic)

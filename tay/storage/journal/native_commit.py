"""Group commit on the C writer thread: ``NativeCommitter``, the twin of ``GroupCommitter``.

Same interface and rules as ``tay.storage.journal.commit`` (tickets, natural batching,
``completion_fd``, ``submit`` futures, ``wait``, stop for good), but the batch's ``pwrite``,
read-back, CRC, ``fdatasync``, path re-checks, rotation and cut-back all run on a native
thread (``csrc/writer.c``) that never takes the GIL. The journal is handed over on start (its
descriptors and tail) and handed back, updated, by ``close``; in between only the writer
touches it.

``make_committer`` picks the twin: the C one when the native module is built and the
journal uses the real I/O seam, else the Python one (a test's fault-injecting ``FaultyIO``
or ``TAY_NATIVE=python`` keep the Python writer).
"""

from __future__ import annotations

import os
import struct
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Sequence

from tay.failures import RecoveryRefused, WriterStopped
from tay.storage import layout
from tay.storage.events import journal_records
from tay.storage.fsio import RealIO
from tay.storage.journal.commit import CommitStats, GroupCommitter, check_batching
from tay.storage.journal.writer import Journal, JournalRecord, Receipt

WRITERS = ("auto", "c", "python")
# The fair-scheduler slice the C writer thread asks for (the kernel's least, 0.1 ms): on a
# busy machine its wake-ups after each fdatasync waited on run queues behind the default
# slice (docs/benchmarks.md, eighth session); a real-time priority replaces it
WRITER_SLICE_US = 100
_KEPT_RECEIPTS = 4096
# a record's meta for tay_writer_submit, as tay._native.writer.pack_submission packs it
_META_PACK = struct.Struct("=4Q").pack
_META_PACK2 = struct.Struct("=8Q").pack  # two and three records' metas, one pack each
_META_PACK3 = struct.Struct("=12Q").pack


def native_writer_available() -> bool:
    try:
        import tay._native.writer  # noqa: F401
    except ImportError:
        return False
    return True


def make_committer(journal: Journal, max_events: int = 1, interval_ms: int = 0, *,
                   linger: bool = False, writer: str = "auto", rt_priority: int = 0,
                   gather_us: int = 0) -> "GroupCommitter | NativeCommitter":
    """The committer for ``journal``: ``writer`` "c", "python" or "auto" (C when it can);
    ``rt_priority`` 1..99 runs the C writer thread SCHED_FIFO (C only)."""
    if writer not in WRITERS:
        raise RecoveryRefused("argument", "unknown_journal_writer", value=writer)
    native_io = type(journal.io) is RealIO and journal.io.native.IMPLEMENTATION == "c"
    if writer == "c" or (writer == "auto" and native_io and native_writer_available()):
        return NativeCommitter(journal, max_events, interval_ms, linger=linger,
                               rt_priority=rt_priority, gather_us=gather_us)
    if rt_priority:
        raise RecoveryRefused("argument", "rt_priority_needs_c_writer", value=rt_priority)
    return GroupCommitter(journal, max_events, interval_ms, linger=linger, gather_us=gather_us)


def _ledger_config(journal: Journal) -> dict[str, Any]:
    """The journal's SEGMENT-LEDGER for the C writer, which appends each successor's entry
    to it exactly as ``LedgerWriter.record`` does."""
    ledger = journal.ledger
    if ledger is None:
        return {}
    return {"ledger_fd": ledger.fd, "epoch_id": ledger.epoch_id, "ledger_size": ledger.size,
            "ledger_highest": ledger.highest_id}


class NativeCommitter:
    """The journal's C writer thread behind the committer interface."""

    implementation = "c"

    def __init__(self, journal: Journal, max_events: int = 1, interval_ms: int = 0, *,
                 linger: bool = False, rt_priority: int = 0, gather_us: int = 0) -> None:
        check_batching(max_events, interval_ms, linger, gather_us)
        if journal.stopped is not None:
            raise journal.stopped
        self.journal = journal
        self.max_events = max_events
        self.interval_s = interval_ms / 1000.0
        self.linger = linger
        self.gather_us = gather_us  # group commit under load (commit.gather_wait)
        self.rt_priority = rt_priority  # kept for each writer thread after a compaction
        # an online compaction suspends the C thread and resumes on the new epoch's tail
        # with a new one: tickets continue from ``_ticket_base``, and what the earlier
        # threads counted is kept in ``_retired`` / ``_retired_observations``
        self._ticket_base = 0
        self._retired: dict[str, int] = {}
        self._retired_observations: dict[str, Any] | None = None
        self._observe_bounds: tuple[Sequence[float], Sequence[int]] | None = None
        self._suspending = False
        self._writer = self._start(journal)
        self.completion_fd = self._writer.event_fd
        self._stopped: WriterStopped | None = None
        self._closed = False
        self._lock = threading.Condition()
        self._pending: deque[tuple[int, Future[Receipt]]] = deque()  # submit() futures
        self._receipts: deque[dict[str, int]] = deque(maxlen=_KEPT_RECEIPTS)
        self._resolver: threading.Thread | None = None
        self._final: dict[str, int] | None = None  # counters and durable once freed
        self._final_phases: dict[str, int] | None = None  # the last thread's, once closed

    def _start(self, journal: Journal) -> Any:
        from tay._native.writer import NativeWriter

        return NativeWriter(
            # the root, then each directory down to the segments (a Store-v2 epoch's tail
            # is epochs/e-<id>/segments)
            dir_fds=[journal.root_fd, *journal.dir_fds],
            dir_names=[journal.root, *journal.dir_chain],
            lock_fd=journal.lock.fd, lock_name=layout.LOCK_NAME, segment_fd=journal.fd,
            store_id=journal.store_id, segment_id=journal.segment_id,
            first_sequence=journal.first_sequence, size=journal.size,
            record_count=journal.record_count, next_sequence=journal.next_sequence,
            history_bytes=journal.history_bytes, segment_crc=journal.segment_crc,
            sync=journal.durability == "sync", rotation_target=journal.rotation_target,
            max_events=self.max_events, interval_ms=round(self.interval_s * 1000),
            linger=self.linger, rt_priority=self.rt_priority, slice_us=WRITER_SLICE_US,
            gather_us=self.gather_us,
            **_ledger_config(journal))

    # -- producer side ------------------------------------------------------------------
    @property
    def holds(self) -> bool:
        return self.max_events > 1

    def append(self, records: Sequence[JournalRecord], hold: bool = False) -> int:
        """Queue ``records`` as one atomic submission and return its ticket."""
        if not records:
            raise RecoveryRefused("argument", "empty_submission")
        try:
            return self._writer.submit(records, hold) + self._ticket_base
        except (ValueError, RuntimeError) as error:  # imported here: off the hot path
            from tay._native.writer import WriterClosed, WriterSequenceError

            if isinstance(error, WriterSequenceError):
                raise RecoveryRefused("argument", "sequence_discontinuity",
                                      path=self.journal.root, sequence=records[0][0],
                                      error=str(error)) from None
            if isinstance(error, WriterClosed):
                raise WriterStopped("io", "committer_closed") from None
            raise

    def append_events(self, sequenced: Sequence[tuple[int, Any]], hold: bool = False) -> int:
        """``append(journal_records(sequenced), hold)``: an engine step's (sequence, Event)
        pairs whose bytes the engine already holds (every per-job step) are packed for the
        writer here, with no record tuples and no call per layer between. Anything else, or
        anything the writer refuses (nothing is queued then), goes the general way, which
        raises exactly as it does."""
        writer = self._writer
        if writer is not None:
            try:
                count = len(sequenced)
                if count == 1:
                    sequence, event = sequenced[0]
                    blob = event.raw
                    meta = _META_PACK(event.type, event.schema, sequence, len(blob))
                elif count == 3:  # a success and the next start: no comprehension frames
                    (s0, e0), (s1, e1), (s2, e2) = sequenced
                    r0, r1, r2 = e0.raw, e1.raw, e2.raw
                    meta = _META_PACK3(e0.type, e0.schema, s0, len(r0), e1.type, e1.schema,
                                       s1, len(r1), e2.type, e2.schema, s2, len(r2))
                    blob = b"".join((r0, r1, r2))
                elif count == 2:  # a success with nothing to start next
                    (s0, e0), (s1, e1) = sequenced
                    r0, r1 = e0.raw, e1.raw
                    meta = _META_PACK2(e0.type, e0.schema, s0, len(r0), e1.type, e1.schema,
                                       s1, len(r1))
                    blob = b"".join((r0, r1))
                else:
                    meta = b"".join([_META_PACK(event.type, event.schema, sequence,
                                                len(event.raw))
                                     for sequence, event in sequenced])
                    blob = b"".join([event.raw for _, event in sequenced])
            except (struct.error, TypeError):
                pass
            else:
                if type(blob) is bytes:
                    ticket = writer.submit_packed(len(sequenced), meta, blob, hold)
                    if ticket:
                        return ticket + self._ticket_base
        return self.append(journal_records(sequenced), hold)

    def submit(self, records: Sequence[JournalRecord], hold: bool = False) -> Future[Receipt]:
        """Queue ``records``; the future resolves with the batch ``Receipt`` once durable."""
        future: Future[Receipt] = Future()
        try:
            ticket = self.append(records, hold)
        except (RecoveryRefused, WriterStopped) as refusal:
            future.set_exception(refusal)
            return future
        with self._lock:
            self._pending.append((ticket, future))
            if self._resolver is None:
                self._resolver = threading.Thread(target=self._resolve, daemon=True,
                                                  name="tay-journal-futures")
                self._resolver.start()
            self._lock.notify()
        return future

    def flush(self) -> None:
        self._writer.flush()

    @property
    def durable(self) -> int:
        if self._final is not None:
            return self._final["durable"]
        if self._writer is None:  # suspended: everything submitted is durable
            return self._ticket_base
        return self._writer.durable + self._ticket_base

    def drain_completions(self) -> None:
        if self._writer is not None:  # re-arms the writer's signal too (tay_writer_completed)
            self._writer.completed()
            return
        try:
            os.read(self.completion_fd, 8)
        except BlockingIOError:
            pass

    def completed(self) -> int:
        """``drain_completions``, then ``durable``; -1 once stopped (read ``stopped``)."""
        if self._stopped is None and self._final is None and self._writer is not None:
            durable = self._writer.completed()
            if durable >= 0:
                return durable + self._ticket_base
        self.drain_completions()
        return -1 if self.stopped is not None else self.durable

    def wait(self, ticket: int, timeout: float | None = None) -> None:
        """Block until ``ticket`` is durable; raise ``WriterStopped`` if it never will be."""
        outcome = self._writer.wait(ticket - self._ticket_base, timeout)
        if outcome == "stopped":
            raise self.stopped  # type: ignore[misc]
        if outcome == "closed":
            raise WriterStopped("io", "committer_closed")
        if outcome == "timeout":
            raise TimeoutError(f"ticket {ticket} not durable after {timeout} s")

    @property
    def stopped(self) -> WriterStopped | None:
        if self._stopped is None and self._final is None and self._writer is not None \
                and self._writer.stopped:
            self._stopped = self._failure()
        return self._stopped

    def _failure(self) -> WriterStopped:
        report = self._writer.failure()
        kind, reason = report["kind"], report["reason"]
        extra: dict[str, Any] = {}
        if kind == "io":
            code = report["errno"]
            extra = {"errno": code, "error": os.strerror(code) if code else report["detail"]}
        elif reason == "path_changed":
            extra = {"name": report["name"]} if report["name"] else {}
            if report["links"]:
                extra = {"links": report["links"]}
        if report["detail"]:
            extra["detail"] = report["detail"]
        if report["cut_back"] == 1:
            extra.update(cut_back_to=report["cut_back_to"], cut_back_bytes=report["cut_back_bytes"])
        elif report["cut_back"] == 2:
            code = report["cut_back_errno"]
            extra.update(cut_back_failed=os.strerror(code) if code else "failed",
                         cut_back_errno=code)
        return WriterStopped(kind, reason, path=report["path"] or None,
                             segment_id=report["segment_id"] or None, **extra)

    def _counters(self) -> dict[str, int]:
        if self._final is not None:
            return self._final
        if self._writer is None:
            return {"submissions": 0, "events": 0, "batches": 0, "fsyncs": 0,
                    "largest_batch": 0, "writes": 0, "syncs": 0, "gathered": 0, **self._retired}
        counters = self._writer.stats()
        for name, count in self._retired.items():
            counters[name] = (max(counters[name], count) if name == "largest_batch"
                              else counters[name] + count)
        return counters

    def phases(self) -> dict[str, int] | None:
        """The running C thread's time by step (``NativeWriter.phases``, ns totals); None
        once closed or suspended (a compaction's earlier threads are not added)."""
        if self._final is not None or self._writer is None:
            return self._final_phases
        return self._writer.phases()

    def stats(self) -> CommitStats:
        counters = self._counters()
        return CommitStats(submissions=counters["submissions"], events=counters["events"],
                           batches=counters["batches"], fsyncs=counters["fsyncs"],
                           largest_batch=counters["largest_batch"],
                           gathered=counters["gathered"])

    def scheduling(self) -> tuple[int, int]:
        """The running writer thread's ``(policy, priority)`` (``os.SCHED_FIFO``, ...)."""
        return self._writer.scheduling()

    def fair_slice(self) -> tuple[int, int, int]:
        """The running writer thread's ``(slice_ns, nice, errno)`` (``NativeWriter.fair_slice``)."""
        return self._writer.fair_slice()

    def observe(self, latency_bounds_s: Sequence[float], batch_bounds: Sequence[int]) -> None:
        """Keep per-batch histograms in C (the Python twin calls ``observer`` per batch on
        its thread instead; this thread cannot call Python)."""
        self._observe_bounds = (latency_bounds_s, batch_bounds)
        self._writer.observe(latency_bounds_s, batch_bounds)

    def observations(self) -> dict[str, Any] | None:
        """The C histograms (``NativeWriter.observations``); None once closed."""
        if self._final is not None:
            return None
        if self._writer is None:
            return self._retired_observations
        return _add_observations(self._writer.observations(), self._retired_observations)

    def io_counts(self) -> dict[str, int]:
        """Writes and syncs issued so far (what the fault seam counts)."""
        counters = self._counters()
        return {"writes": counters["writes"], "syncs": counters["syncs"]}

    def suspend(self) -> Journal:
        """Drain everything queued, stop the C thread and hand the journal back, updated (an
        online compaction switching epochs); ``resume`` starts a new thread. Raises
        ``WriterStopped`` if the writer stopped (it never resumes then)."""
        self._suspending = True
        try:
            stopped = self._hand_back()
        finally:
            self._suspending = False
        if stopped is not None:  # closed for good: ``close`` has nothing left to do
            self._closed = True
            self._final = {**self._counters(), "durable": self._writer.durable + self._ticket_base}
            self._writer.free()
            self.completion_fd = -1
            raise stopped
        counters = self._writer.stats()
        for name, count in counters.items():
            previous = self._retired.get(name, 0)
            self._retired[name] = (max(previous, count) if name == "largest_batch"
                                   else previous + count)
        if self._observe_bounds is not None:
            self._retired_observations = _add_observations(self._writer.observations(),
                                                           self._retired_observations)
        self._ticket_base += self._writer.durable
        self._writer.free()
        self._writer = None
        self.completion_fd = -1
        return self.journal

    def resume(self, journal: Journal) -> None:
        """A new C thread writing to ``journal`` (its sequences continue the submissions);
        tickets carry on; ``completion_fd`` is a new descriptor (watch it again)."""
        self.journal = journal
        self._writer = self._start(journal)
        if self._observe_bounds is not None:
            self._writer.observe(*self._observe_bounds)
        self.completion_fd = self._writer.event_fd

    def abandon(self, failure: WriterStopped) -> None:
        """After ``suspend``: never write again (the journal it had cannot be resumed)."""
        self._stopped = failure
        self._final = {**self._counters(), "durable": self._ticket_base}
        self._closed = True

    def close(self) -> None:
        """Drain everything queued, stop the thread and hand the journal back, updated."""
        if self._closed:
            return
        self._closed = True
        if self._writer is None:  # suspended and never resumed
            self._final = {**self._counters(), "durable": self._ticket_base}
            return
        self._hand_back()
        counters = self._counters()
        self._final_phases = self._writer.phases()
        self._final = {**counters, "durable": self._writer.durable + self._ticket_base}
        self._writer.free()
        self.completion_fd = -1

    def _hand_back(self) -> WriterStopped | None:
        """Drain and stop the C thread, settle ``submit`` futures, update the journal."""
        stopped = self.stopped
        tail = self._writer.close()
        with self._lock:
            self._lock.notify_all()
        if self._resolver is not None:
            self._resolver.join()
            self._resolver = None
        journal = self.journal
        journal.fd = tail["segment_fd"]
        for name in ("segment_id", "first_sequence", "size", "record_count", "next_sequence",
                     "history_bytes", "segment_crc"):
            setattr(journal, name, tail[name])
        if hasattr(journal, "committed_size"):
            journal.committed_size = tail["committed_size"]
        if journal.ledger is not None:
            journal.ledger.size = tail["ledger_size"]
            journal.ledger.highest_id = tail["ledger_highest"]
        stopped = stopped or self.stopped
        if stopped is not None:
            journal.stopped = stopped
        return stopped

    # -- futures of submit() --------------------------------------------------------------
    def _resolve(self) -> None:
        """Resolve ``submit`` futures in ticket order; blocks in C (no GIL) meanwhile."""
        while True:
            with self._lock:
                while not self._pending and not (self._closed or self._suspending):
                    self._lock.wait()
                if not self._pending:
                    return
                ticket = self._pending[0][0]
            base = self._ticket_base
            outcome = self._writer.wait(ticket - base, None)
            # durable first: C stores a batch's receipt before it moves durable, so every
            # ticket up to this value has its receipt in what is fetched next (read the
            # other way round, a batch finished in between had no receipt yet)
            durable = self._writer.durable + base
            for receipt in self._writer.new_receipts():
                receipt["first_ticket"] += base
                receipt["last_ticket"] += base
                self._receipts.append(receipt)
            failure: WriterStopped | None = None
            if outcome == "stopped":
                failure = self.stopped
            elif outcome == "closed":
                failure = WriterStopped("io", "committer_closed")
            with self._lock:
                while self._pending and (self._pending[0][0] <= durable or failure is not None):
                    pending_ticket, future = self._pending.popleft()
                    if pending_ticket <= durable:
                        future.set_result(self._receipt_of(pending_ticket))
                    else:
                        future.set_exception(failure)  # type: ignore[arg-type]

    def _receipt_of(self, ticket: int) -> Receipt:
        durability = self.journal.durability
        for receipt in reversed(self._receipts):
            if receipt["first_ticket"] <= ticket <= receipt["last_ticket"]:
                return Receipt(receipt["segment_id"], receipt["offset"],
                               receipt["first_sequence"], receipt["last_sequence"],
                               receipt["count"], durability)
        raise RuntimeError(f"no receipt kept for durable ticket {ticket}")


def _add_observations(current: dict[str, Any], earlier: dict[str, Any] | None) -> dict[str, Any]:
    """Histograms of the running C thread plus those of the threads before it."""
    if earlier is None:
        return current
    out: dict[str, Any] = {"batches": current["batches"] + earlier["batches"]}
    for key in ("events", "write", "sync"):
        counts, total = current[key]
        old_counts, old_total = earlier[key]
        out[key] = ([a + b for a, b in zip(counts, old_counts)], total + old_total)
    return out

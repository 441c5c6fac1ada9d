"""Group commit: one writer thread turns queued submissions into fsynced batches.

``GroupCommitter(journal, max_events=1, interval_ms=0)``: ``submit(records)`` queues one
submission (a list of journal records that must stay together, e.g. finish + result) and
returns a ``concurrent.futures.Future``. The writer thread takes submissions in order,
packs them into a batch of at most ``max_events`` records (a single larger submission
forms a batch of its own; submissions are never split), writes the batch with one
``append_batch`` and calls ``sync``; only then does it resolve the batch's futures with
the batch ``Receipt``. With ``interval_ms > 0`` the thread waits up to that long after the
oldest queued submission *arrived* for the batch to fill, so no submission waits longer than
``interval_ms`` for its batch to start (time spent behind an earlier batch's fsync counts).
The default (1, 0) is one fsync per event.

If a write or sync fails the committer stops for good: the failing batch, every queued
submission and every later ``submit`` fail with ``WriterStopped``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Sequence

from tay.failures import RecoveryRefused, StorageFailure, WriterStopped
from tay.storage.journal.writer import Journal, JournalRecord, Receipt


Submission = tuple[list[JournalRecord], "Future[Receipt]"]


@dataclass
class CommitStats:
    """Counters for benchmarks and tests."""

    submissions: int = 0
    events: int = 0
    batches: int = 0
    fsyncs: int = 0
    largest_batch: int = 0


class GroupCommitter:
    """The journal's writer thread and its submission queue."""

    def __init__(self, journal: Journal, max_events: int = 1, interval_ms: int = 0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(max_events, int) or max_events < 1:
            raise RecoveryRefused("argument", "max_events_must_be_positive", value=max_events)
        if not isinstance(interval_ms, int) or interval_ms < 0:
            raise RecoveryRefused("argument", "interval_ms_must_not_be_negative", value=interval_ms)
        self.journal = journal
        self.max_events = max_events
        self.interval_s = interval_ms / 1000.0
        self._clock = clock  # seconds; injectable so tests can pin the batching deadline
        self._queue: deque[Submission] = deque()
        self._arrivals: deque[float] = deque()  # clock() at submit, parallel to _queue
        self._queued_events = 0
        self._cond = threading.Condition()
        self._closing = False
        # what the writer is blocked on, so submit() notifies only when it can matter:
        # "idle" (empty queue) or "filling" (an interval batch waiting for max_events or
        # its deadline; the timed wait ends by itself, a notify only brings it forward)
        self._writer_wait: str | None = None
        self._stopped: WriterStopped | None = None
        self._stats = CommitStats()
        self._thread = threading.Thread(target=self._run, name="tay-journal-writer", daemon=True)
        self._thread.start()

    # -- producer side ------------------------------------------------------------------
    def submit(self, records: Sequence[JournalRecord]) -> Future[Receipt]:
        """Queue ``records`` as one atomic submission; the future resolves once durable."""
        future: Future[Receipt] = Future()
        records = list(records)
        with self._cond:
            if self._stopped is not None:
                future.set_exception(self._stopped)
                return future
            if self._closing:
                future.set_exception(WriterStopped("io", "committer_closed"))
                return future
            if not records:
                future.set_exception(RecoveryRefused("argument", "empty_submission"))
                return future
            now = self._clock()
            self._queue.append((records, future))
            self._arrivals.append(now)
            self._queued_events += len(records)
            self._stats.submissions += 1
            waiting = self._writer_wait
            if waiting == "idle" or (waiting == "filling" and (
                    self._queued_events >= self.max_events
                    or now >= self._arrivals[0] + self.interval_s)):
                self._cond.notify()
        return future

    def stats(self) -> CommitStats:
        with self._cond:
            return CommitStats(**vars(self._stats))

    @property
    def stopped(self) -> WriterStopped | None:
        return self._stopped

    def close(self) -> None:
        """Drain everything queued, then stop the thread. Does not close the journal."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    # -- writer thread ------------------------------------------------------------------
    def _next_batch(self) -> list[Submission] | None:
        """Wait for work (and, with an interval, for the batch to fill); None means exit."""
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._writer_wait = "idle"
                self._cond.wait()
                self._writer_wait = None
            if self.interval_s > 0:
                deadline = self._arrivals[0] + self.interval_s
                while self._queued_events < self.max_events and not self._closing:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        break
                    self._writer_wait = "filling"
                    self._cond.wait(remaining)
                    self._writer_wait = None
            batch = [self._take()]
            size = len(batch[0][0])
            while self._queue and size + len(self._queue[0][0]) <= self.max_events:
                batch.append(self._take())
                size += len(batch[-1][0])
            self._queued_events -= size
            return batch

    def _take(self) -> Submission:
        self._arrivals.popleft()
        return self._queue.popleft()

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            records = [record for submission, _ in batch for record in submission]
            try:
                receipt = self.journal.append_batch(records)
                self.journal.sync()
            except StorageFailure as failure:
                self._stop(batch, failure)
                return
            except Exception as error:  # a bug must not leave futures hanging
                self._stop(batch, WriterStopped("io", "writer_crashed", error=repr(error)))
                return
            with self._cond:
                self._stats.batches += 1
                self._stats.events += len(records)
                self._stats.largest_batch = max(self._stats.largest_batch, len(records))
                if self.journal.durability == "sync":
                    self._stats.fsyncs += 1
            for _, future in batch:
                future.set_result(receipt)

    def _stop(self, batch: list[Submission], failure: StorageFailure) -> None:
        stopped = failure if isinstance(failure, WriterStopped) else WriterStopped(
            failure.kind, failure.reason, path=failure.path, sequence=failure.sequence)
        with self._cond:
            self._stopped = stopped
            pending = list(self._queue)
            self._queue.clear()
            self._arrivals.clear()
            self._queued_events = 0
        for _, future in [*batch, *pending]:
            future.set_exception(stopped)

"""Group commit: one writer thread turns queued submissions into fsynced batches.

``GroupCommitter(journal, max_events=1, interval_ms=0)`` is the pure-Python committer
(``tay.storage.journal.native_commit`` is its C twin, with the same interface).

Two ways to submit one submission (a list of journal records that must stay together,
e.g. finish + result):

- ``append(records, hold=False) -> ticket``: the lean path of the event loop. Tickets count
  submissions from 1; ``durable`` is the highest ticket whose batch is fsynced (every lower
  one is too). ``completion_fd`` (an eventfd, or a pipe where there is none) becomes readable
  after every durable batch and when the writer stops: the loop watches it, calls
  ``completed()`` (``drain_completions()`` and ``durable`` in one call, -1 once stopped) and
  releases what ``durable`` now covers. No object is created per submission.
- ``submit(records, hold=False) -> Future`` (resolved with the batch ``Receipt``) and
  ``wait(ticket)``: blocking callers (recovery's own events, tests).

Batching (natural batching): the writer packs queued submissions in order into a batch of at
most ``max_events`` records (a larger submission forms a batch alone; submissions are never
split), writes it with one ``append_batch`` and one ``sync``, and only then makes it
durable. With ``max_events == 1`` every submission is written at once (the default: one
fsync per event). With ``max_events > 1`` a *held* submission (``hold=True``) waits until
the submitter calls ``flush()`` (the event loop does once it has no more ready input), the
batch is full, or ``interval_ms`` (if > 0) has passed since the oldest queued submission
arrived: ``interval_ms`` only caps the wait. A submission that is not held is a flush.
``linger=True`` (needs ``max_events > 1`` and ``interval_ms > 0``) ignores ``flush``: held
submissions wait for a full batch or their interval (fewer, larger fsyncs for up to
``interval_ms`` more latency).

Gathering (``gather_us > 0``, group commit without ``linger``): a flushed batch waits for
its siblings only under load, as ``gather_wait`` rules: when the previous batch carried
several submissions, fewer are queued now, and it was made durable less than one recent
fdatasync ago; then at most that fdatasync's time and ``gather_us`` (and never past
``interval_ms``). It goes as soon as as many submissions as the previous
batch had, or a full batch, are queued, or a ``wait`` caller needs it. A lone submitter
(batches of one) or a quiet writer never waits.

If a write or sync fails the committer stops for good: the failing batch, every queued
submission and every later one fail with ``WriterStopped``; ``durable`` never moves again.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Sequence

from tay._frozen import Record, replace
from tay.failures import RecoveryRefused, StorageFailure, WriterStopped
from tay.storage.journal.writer import Journal, JournalRecord, Receipt

# (records, ticket, future or None, arrival time)
Submission = tuple[list[JournalRecord], int, "Future[Receipt] | None", float]


class CommitStats(Record):
    """Counters for benchmarks and tests."""

    __slots__ = ("submissions", "events", "batches", "fsyncs", "largest_batch", "gathered")
    submissions: int
    events: int
    batches: int
    fsyncs: int
    largest_batch: int
    gathered: int  # batches that waited for their siblings (gather_wait)

    def __init__(self, submissions: int = 0, events: int = 0, batches: int = 0, fsyncs: int = 0,
                 largest_batch: int = 0, gathered: int = 0) -> None:
        self.submissions = submissions
        self.events = events
        self.batches = batches
        self.fsyncs = fsyncs
        self.largest_batch = largest_batch
        self.gathered = gathered

    def as_dict(self) -> dict[str, int]:
        """The counters by name, in field order (what ``vars`` gave of the dataclass)."""
        return {name: getattr(self, name) for name in self.__slots__}


# The server's default gather cap (--group-commit-gather-us): under load a batch waits at
# most this long for its siblings, and at most one recent fdatasync (docs/journal.md)
GATHER_US = 1000


def gather_wait(queued: int, siblings: int, since_done_ns: int, sync_ns: int,
                cap_ns: int) -> int:
    """How long (ns) a flushed batch waits for more submissions (0: written now); the rule
    of ``tay_writer_gather_wait``: only when the previous batch carried ``siblings`` >= 2
    submissions, fewer are ``queued``, and it was made durable ``since_done_ns`` ago, less
    than the recent fdatasync time ``sync_ns``; then ``min(sync_ns, cap_ns)``."""
    if (cap_ns <= 0 or siblings < 2 or queued >= siblings or since_done_ns < 0
            or since_done_ns >= sync_ns):
        return 0
    return min(sync_ns, cap_ns)


def check_batching(max_events: int, interval_ms: int, linger: bool = False,
                   gather_us: int = 0) -> None:
    """The committer settings both twins accept."""
    if type(gather_us) is not int or gather_us < 0:
        raise RecoveryRefused("argument", "gather_us_must_not_be_negative", value=gather_us)
    if type(max_events) is not int or max_events < 1:
        raise RecoveryRefused("argument", "max_events_must_be_positive", value=max_events)
    if type(interval_ms) is not int or interval_ms < 0:
        raise RecoveryRefused("argument", "interval_ms_must_not_be_negative", value=interval_ms)
    if linger and (max_events < 2 or interval_ms < 1):
        raise RecoveryRefused("argument", "linger_needs_max_events_and_interval",
                              max_events=max_events, interval_ms=interval_ms)


class CompletionSignal:
    """The fd a loop watches: an eventfd on Linux, a pipe elsewhere. Writes never block.

    A notify while the previous one is not yet drained writes nothing, like the C writer's
    signal: ``drain`` re-arms it after its read (before it, a notify between the two would
    be read and leave nothing to wake the reader), and the reader looks at ``durable`` /
    ``stopped`` only after ``drain``, so what a skipped notify published is seen."""

    def __init__(self) -> None:
        self.signalled = False  # notified and not drained since
        if hasattr(os, "eventfd"):
            self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._write_fd = self.fd
        else:  # pragma: no cover - non-Linux development hosts
            self.fd, self._write_fd = os.pipe()
            os.set_blocking(self.fd, False)
            os.set_blocking(self._write_fd, False)

    def notify(self) -> None:
        if self.signalled:
            return
        self.signalled = True
        try:
            os.write(self._write_fd, (1).to_bytes(8, "little"))
        except BlockingIOError:  # the counter (or pipe) is full: the reader is awake anyway
            pass

    def drain(self) -> None:
        try:
            os.read(self.fd, 4096)
        except BlockingIOError:
            pass
        self.signalled = False

    def close(self) -> None:
        os.close(self.fd)
        if self._write_fd != self.fd:
            os.close(self._write_fd)


class GroupCommitter:
    """The journal's writer thread and its submission queue (pure Python)."""

    implementation = "python"

    def __init__(self, journal: Journal, max_events: int = 1, interval_ms: int = 0, *,
                 linger: bool = False, gather_us: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        check_batching(max_events, interval_ms, linger, gather_us)
        self.journal = journal
        self.max_events = max_events
        self.interval_s = interval_ms / 1000.0
        self.linger = linger
        self.gather_us = gather_us
        # gathering (gather_wait): the cap (ns, 0 without group commit or with linger), the
        # previous batch's submissions, when it was made durable (clock s), an average of
        # recent fdatasync times (ns), the target of the batch being gathered, and the
        # highest ticket a ``wait`` caller needs now
        self._gather_ns = gather_us * 1000 if max_events > 1 and not linger else 0
        self._last_subs = 0
        self._last_done: float | None = None
        self._sync_avg_ns = 0
        self._gather_target = 0
        self._urgent = 0
        self._clock = clock  # seconds; injectable so tests can pin the batching deadline
        self._queue: deque[Submission] = deque()
        self._queued_events = 0
        self._tickets = 0  # the last ticket handed out
        self._submit_next = journal.next_sequence  # what the next submission must start at
        self._flushed = 0  # every ticket up to this one may be written now
        self.durable = 0  # every ticket up to this one is durable
        self._cond = threading.Condition()
        self._closing = False
        self._exited = False  # the thread has drained the queue after close()
        # what the writer is blocked on, so a submitter notifies only when it can matter:
        # "idle" (empty queue), "holding" (held submissions waiting for a flush, a full
        # batch or their deadline; a timed wait ends by itself, a notify brings it forward)
        # or "gathering" (a flushed batch waiting for its siblings: see _gathered)
        self._writer_wait: str | None = None
        self._stopped: WriterStopped | None = None
        self._stats = CommitStats()
        self._signal = CompletionSignal()
        self.completion_fd = self._signal.fd
        # called on the writer thread after each durable batch: (events, write_s, sync_s)
        self.observer: Callable[[int, float, float], None] | None = None
        self._thread = threading.Thread(target=self._run, name="tay-journal-writer", daemon=True)
        self._thread.start()

    # -- producer side ------------------------------------------------------------------
    @property
    def holds(self) -> bool:
        """Whether held submissions wait for ``flush`` (only batches of several can)."""
        return self.max_events > 1

    def append(self, records: Sequence[JournalRecord], hold: bool = False) -> int:
        """Queue ``records`` as one atomic submission and return its ticket."""
        return self._enqueue(records, hold, None)

    def submit(self, records: Sequence[JournalRecord], hold: bool = False) -> Future[Receipt]:
        """Queue ``records`` as one atomic submission; the future resolves once durable."""
        future: Future[Receipt] = Future()
        self._enqueue(records, hold, future)
        return future

    def _enqueue(self, records: Sequence[JournalRecord], hold: bool,
                 future: Future[Receipt] | None) -> int:
        records = list(records)
        with self._cond:
            refusal = self._refusal(records)
            if refusal is not None and future is None and not isinstance(refusal, WriterStopped):
                raise refusal  # an empty or discontinuous submission: a caller's bug
            self._tickets += 1
            ticket = self._tickets
            if refusal is not None:  # never durable: the caller sees ``stopped``
                if future is not None:
                    future.set_exception(refusal)
                return ticket
            now = self._clock()
            self._submit_next += len(records)
            self._queue.append((records, ticket, future, now))
            self._queued_events += len(records)
            self._stats.submissions += 1
            if not hold or self.max_events == 1:
                self._flushed = ticket
            waiting = self._writer_wait
            if waiting == "gathering":
                if self._gathered():
                    self._cond.notify()
            elif waiting is not None and (
                    self._flushed >= self._queue[0][1]
                    or self._queued_events >= self.max_events
                    or (self.interval_s > 0 and (
                        waiting == "idle" or now >= self._queue[0][3] + self.interval_s))):
                self._cond.notify()
        return ticket

    def _refusal(self, records: list[JournalRecord]) -> StorageFailure | None:
        if self._stopped is not None:
            return self._stopped
        if self._closing:
            return WriterStopped("io", "committer_closed")
        if not records:
            return RecoveryRefused("argument", "empty_submission")
        for index, record in enumerate(records):
            if record[0] != self._submit_next + index:
                return RecoveryRefused("argument", "sequence_discontinuity", sequence=record[0],
                                       expected=self._submit_next + index, index=index)
        return None

    def flush(self) -> None:
        """The submitter has no more ready input: everything queued may be written now."""
        if self.linger:
            return
        with self._cond:
            if self._flushed == self._tickets:
                return
            self._flushed = self._tickets
            if self._writer_wait is not None and self._writer_wait != "gathering":
                self._cond.notify()

    def drain_completions(self) -> None:
        """Consume the wake-ups of ``completion_fd`` (then read ``durable`` / ``stopped``)."""
        self._signal.drain()

    def completed(self) -> int:
        """``drain_completions``, then ``durable``; -1 once stopped (read ``stopped``)."""
        self._signal.drain()
        return -1 if self._stopped is not None else self.durable

    def wait(self, ticket: int, timeout: float | None = None) -> None:
        """Block until ``ticket`` is durable; raise ``WriterStopped`` if it never will be."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushed = max(self._flushed, min(ticket, self._tickets))
            self._urgent = max(self._urgent, min(ticket, self._tickets))  # no gathering
            self._cond.notify_all()
            while self.durable < ticket:
                if self._stopped is not None:
                    raise self._stopped
                if self._exited:
                    raise WriterStopped("io", "committer_closed")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"ticket {ticket} not durable after {timeout} s")
                self._cond.wait(remaining)

    def stats(self) -> CommitStats:
        with self._cond:
            return replace(self._stats)

    @property
    def stopped(self) -> WriterStopped | None:
        return self._stopped

    def suspend(self) -> Journal:
        """Drain everything queued, stop the thread and hand the journal over (an online
        compaction switching epochs); ``resume`` starts writing again. Raises
        ``WriterStopped`` if the writer stopped (it never resumes then)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        if self._stopped is not None:
            raise self._stopped
        return self.journal

    def resume(self, journal: Journal) -> None:
        """Write to ``journal`` from now on (its sequences continue the submissions);
        tickets, ``durable`` and the completion fd carry on."""
        with self._cond:
            self.journal = journal
            self._submit_next = journal.next_sequence
            self._closing = False
            self._exited = False
        self._thread = threading.Thread(target=self._run, name="tay-journal-writer", daemon=True)
        self._thread.start()

    def abandon(self, failure: WriterStopped) -> None:
        """After ``suspend``: never write again (the journal it had cannot be resumed)."""
        with self._cond:
            self._stopped = failure
            self._exited = True
            self._cond.notify_all()
        self._signal.notify()

    def close(self) -> None:
        """Drain everything queued, then stop the thread. Does not close the journal."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        if self.completion_fd >= 0:
            self._signal.close()
            self.completion_fd = -1

    # -- writer thread ------------------------------------------------------------------
    def _ready(self) -> bool:
        """Whether the head of the queue may be written now (the lock is held)."""
        return (self._flushed >= self._queue[0][1] or self._queued_events >= self.max_events
                or self._closing)

    def _gathered(self) -> bool:
        """Whether a gathering batch may go now (the lock is held)."""
        return (len(self._queue) >= self._gather_target
                or self._queued_events >= self.max_events or self._closing
                or self._urgent >= self._queue[0][1])

    def _gather_until(self) -> float | None:
        """Until when the flushed head gathers (None: it does not). The lock is held."""
        now = self._clock()
        since_ns = -1 if self._last_done is None else int((now - self._last_done) * 1e9)
        wait = gather_wait(len(self._queue), self._last_subs, since_ns, self._sync_avg_ns,
                           self._gather_ns)
        if not wait:
            return None
        until = now + wait / 1e9
        if self.interval_s > 0:
            until = min(until, self._queue[0][3] + self.interval_s)
        self._gather_target = self._last_subs
        self._stats.gathered += 1
        return until

    def _next_batch(self) -> list[Submission] | None:
        """Wait for work that may be written (see the module doc); None means exit."""
        with self._cond:
            decided = False  # whether the head may gather was decided
            gather_until: float | None = None
            while True:
                if not self._queue:
                    if self._closing:
                        self._exited = True
                        self._cond.notify_all()
                        return None
                    self._writer_wait = "idle"
                    self._cond.wait()
                elif self._ready():
                    if not decided and self._gather_ns:
                        decided = True
                        gather_until = self._gather_until()
                    if gather_until is None or self._gathered():
                        break
                    remaining = gather_until - self._clock()
                    if remaining <= 0:
                        break
                    self._writer_wait = "gathering"
                    self._cond.wait(remaining)
                else:
                    self._writer_wait = "holding"
                    if self.interval_s > 0:
                        remaining = self._queue[0][3] + self.interval_s - self._clock()
                        if remaining <= 0:
                            self._writer_wait = None
                            break
                        self._cond.wait(remaining)
                    else:
                        self._cond.wait()
                self._writer_wait = None
            self._writer_wait = None
            batch = [self._queue.popleft()]
            size = len(batch[0][0])
            while self._queue and size + len(self._queue[0][0]) <= self.max_events:
                batch.append(self._queue.popleft())
                size += len(batch[-1][0])
            self._queued_events -= size
            return batch

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            records = [record for submission in batch for record in submission[0]]
            try:
                started = time.perf_counter()
                receipt = self.journal.append_batch(records)
                written = time.perf_counter()
                self.journal.sync()
                synced = time.perf_counter()
            except StorageFailure as failure:
                self._stop(batch, failure)
                return
            except Exception as error:  # a bug must not leave submitters waiting
                self._stop(batch, WriterStopped("io", "writer_crashed", error=repr(error)))
                return
            with self._cond:
                self._last_subs = len(batch)
                self._last_done = self._clock()
                sync_ns = int((synced - written) * 1e9) if self.journal.durability == "sync" \
                    else 0
                # recent fdatasync time: an average with weight 1/8 for the newest batch
                self._sync_avg_ns = (self._sync_avg_ns + (sync_ns - self._sync_avg_ns) // 8
                                     if self._sync_avg_ns else sync_ns)
                stats = self._stats
                stats.batches += 1
                stats.events += len(records)
                if len(records) > stats.largest_batch:
                    stats.largest_batch = len(records)
                if self.journal.durability == "sync":
                    stats.fsyncs += 1
                self.durable = batch[-1][1]
                self._cond.notify_all()  # wait() callers
            for _, _, future, _ in batch:
                if future is not None:
                    future.set_result(receipt)
            self._signal.notify()
            if self.observer is not None:
                self.observer(len(records), written - started, synced - written)

    def _stop(self, batch: list[Submission], failure: StorageFailure) -> None:
        stopped = failure if isinstance(failure, WriterStopped) else WriterStopped(
            failure.kind, failure.reason, path=failure.path, sequence=failure.sequence)
        with self._cond:
            self._stopped = stopped
            pending = list(self._queue)
            self._queue.clear()
            self._queued_events = 0
            self._cond.notify_all()
        for _, _, future, _ in [*batch, *pending]:
            if future is not None:
                future.set_exception(stopped)
        self._signal.notify()

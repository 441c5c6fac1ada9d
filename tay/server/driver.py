"""The engine driver: runs the engine on the event-loop thread and releases its effects
only after the events they depend on are durable.

Every engine step yields an ``Outcome``; its events go to the committer as one submission
(``append`` returns a ticket; the writer thread fsyncs) and its effects join an ordered
release queue. The head of that queue is released once the committer's ``durable`` ticket
covers it; a read (no events) waits behind earlier writes too, so nothing not yet durable
is ever visible. The loop learns of durable batches by watching the committer's
``completion_fd``: no future or cross-thread callback per submission. With group commit the
driver holds submissions and flushes them once per loop turn, when every ready input has
been handled (natural batching); the engine's next wake-up is also computed once per turn.
Transports (the Unix socket, HTTP) register a sink per connection handle.

Client admission (``--client-slots`` / ``--client-bytes``) is enforced here, once for both
transports: a producer request submitted with ``admit_bytes`` takes one of the engine's
``ClientPermits`` (refused with ``capacity`` / ``client_slots`` or ``client_bytes``) and
holds it until its stage is released (its reply is out, or failed), so the permits bound
the requests in flight and the bytes they keep in memory.

If the writer stops, nothing is degraded: effects whose events may or may not have reached
the disk become ``unknown_outcome``, reads become ``unavailable``, dispatches are dropped,
and every later command is refused with ``unavailable``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from tay.engine.admission import ClientPermits
from tay.engine.effects import CancelExecution, Effect, Execute, Outcome, Refuse, Reply
from tay.failures import RequestRefused, WriterStopped
from tay.storage.events import journal_records

Sink = Callable[[Effect], None]
log = logging.getLogger("tay.server")


def log_failures(failures: list[dict[str, Any]]) -> None:
    """One INFO line per failed, timed-out or discarded job: ids, task and error type only
    (messages and tracebacks may hold application data; they are in the admin API)."""
    for failure in failures:
        log.info("job %s %s: task=%s queue=%s attempt=%d error_type=%s", failure["job_id"],
                 failure["outcome"], failure["task"], failure["queue"], failure["attempt"],
                 failure["error_type"] or "-",
                 extra={"job_id": failure["job_id"], "task": failure["task"],
                        "queue": failure["queue"], "outcome": failure["outcome"],
                        "error_type": failure["error_type"]})


class EngineLike(Protocol):
    permits: ClientPermits

    def handle(self, command: Any, now_ms: int, mono_ms: int) -> Outcome: ...
    def tick(self, now_ms: int, mono_ms: int) -> Outcome: ...
    def next_wakeup(self) -> int | None: ...


class CommitterLike(Protocol):
    """``GroupCommitter`` or its C twin (``tay.storage.journal.native_commit``)."""

    durable: int
    completion_fd: int  # readable after every batch made durable (and when it stops)
    holds: bool
    linger: bool

    def append(self, records: list[tuple[int, int, int, bytes]], hold: bool = False) -> int: ...
    def flush(self) -> None: ...
    def drain_completions(self) -> None: ...
    def completed(self) -> int: ...  # drain_completions, then durable; -1 once stopped
    @property
    def stopped(self) -> WriterStopped | None: ...


# the longest the engine's timer waits before the wall clock is read again (_arm_wakeup)
WALL_RECHECK_MS = 1000

_last_wall_ms = 0


def wall_ms() -> int:
    """Unix ms; the same int object while the millisecond lasts, so the jobs stamped in
    one millisecond share their timestamps (a retained job keeps several)."""
    global _last_wall_ms
    now = time.time_ns() // 1_000_000
    if now == _last_wall_ms:
        return _last_wall_ms
    _last_wall_ms = now
    return now


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# One engine step's stage in the ordered release: a plain tuple (no object and no __init__
# frame per step), unpacked where it is released.
#   effects: list[Effect]; ticket: the committer ticket it waits for (0: a read);
#   created: perf_counter() when the step ran (the enqueue-ack latency);
#   logs: failures to log once the step is durable (never before: a crash could take them
#   back), or None; permit: the step holds a client permit until it is released.
_Stage = tuple[list[Effect], int, float, list[dict[str, Any]] | None, bool]
_TICKET = 1  # a stage's ticket, read before it is unpacked


class EngineDriver:
    """Owns the engine and the ordered release of its effects. Loop thread only."""

    def __init__(self, engine: EngineLike, committer: CommitterLike,
                 loop: asyncio.AbstractEventLoop,
                 clock: tuple[Callable[[], int], Callable[[], int]] = (wall_ms, mono_ms)) -> None:
        self.engine = engine
        self.permits = engine.permits
        # (wall ms, monotonic ms); tay.testing moves both forward to skip waiting
        self.wall_ms, self.mono_ms = clock
        self.committer = committer
        self.loop = loop
        self.stopped: WriterStopped | None = None
        self.closed = False
        self._sinks: dict[Hashable, Sink] = {}
        # Transports whose sinks queue frames rather than write them: such a sink appends
        # its connection here (``dirty.append``, a builtin call, not a loop callback per
        # connection and turn) when it queues the first frame, and the driver writes each
        # one's frames (its ``flush``) once the release that produced them is done: at the
        # end of a completion (one write per connection per durable batch, in the same
        # loop callback) and at the end of the turn for stages released by ``_apply``.
        self.dirty: list[Any] = []
        self._stages: deque[_Stage] = deque()  # (effects, ticket, created, logs, permit)
        self._wake_handle: asyncio.TimerHandle | None = None
        self._wake_at: int | None = None
        # group commit: submissions are held and flushed at the end of the loop turn, unless
        # the committer lingers for its interval
        self._hold = committer.holds
        self._flush_each_turn = committer.holds and not committer.linger
        self._turn_scheduled = False
        self._unflushed = False  # a submission since the last flush (group commit)
        # a committer that covers every ticket as it is appended (tay.testing's memory
        # store) never signals completion_fd: its writes are released as they are applied
        self._covers_at_once = getattr(committer, "covers_at_once", False)
        # the C committer packs an engine step's events for its writer in one call
        # (NativeCommitter.append_events); others take journal_records and append
        self._append_events = getattr(committer, "append_events", None)
        loop.add_reader(committer.completion_fd, self._on_durable)
        self.on_stopped: Callable[[], None] | None = None
        self._stop_listeners: list[Callable[[], None]] = []
        self.metrics: Any = None  # ServerMetrics: enqueue-ack latency (tay.server.metrics)
        self.draining = False  # SIGTERM: no new dispatch, running executions may report
        self._activity = getattr(engine, "activity", None)
        # an online compaction's copy of every record submitted since its capture (the
        # catch-up it re-frames into the new epoch's tail); None when none is running
        self.tap: list[tuple[int, int, int, bytes]] | None = None

    # -- transports --------------------------------------------------------------------
    def attach(self, conn: Hashable, sink: Sink) -> None:
        self._sinks[conn] = sink

    def detach(self, conn: Hashable) -> None:
        self._sinks.pop(conn, None)

    def add_stop_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` on the loop once the writer stops (state kept outside the
        engine, such as waiting HTTP claims, must stop serving too)."""
        self._stop_listeners.append(listener)

    @property
    def idle(self) -> bool:
        """No effect is waiting for durability."""
        return not self._stages

    # -- commands ----------------------------------------------------------------------
    def submit(self, command: Any, admit_bytes: int | None = None) -> None:
        """Run one command through the engine and queue its effects. ``admit_bytes``: a
        producer request of that many bytes, which needs a client permit first."""
        if self.stopped is not None or self.closed:
            self._refuse_unavailable(command)
            return
        if admit_bytes is None:
            self._apply(self.engine.handle(command, self.wall_ms(), self.mono_ms()))
            return
        try:
            self.permits.acquire(admit_bytes)
        except RequestRefused as refusal:
            self._apply(Outcome(effects=[Refuse(command.conn, command.request_id, refusal)]))
            return
        self._apply(self.engine.handle(command, self.wall_ms(), self.mono_ms()), permit=True)

    def answer(self, effects: list[Effect]) -> None:
        """Queue effects that need no engine step (they still wait behind earlier writes)."""
        self._apply(Outcome(effects=list(effects)))

    def tick(self) -> None:
        self._wake_handle = None
        self._wake_at = None
        if self.stopped is None and not self.closed:
            self._apply(self.engine.tick(self.wall_ms(), self.mono_ms()))

    def _apply(self, outcome: Outcome, permit: bool = False) -> None:
        ticket = 0
        if outcome.events:
            # Each step is its own (held) submission at once, not gathered for the turn: a
            # batch the writer starts meanwhile takes it along (gathering made 20 % more
            # batches in benchmarks.server_path)
            if self.tap is None and self._append_events is not None:
                ticket = self._append_events(outcome.events, self._hold)
            else:
                records = journal_records(outcome.events)
                ticket = self.committer.append(records, self._hold)
                if self.tap is not None:
                    self.tap.extend(records)
            self._unflushed = self._flush_each_turn
        logs = None
        if self._activity is not None and self._activity.unlogged:
            logs = self._activity.take_unlogged()
        if outcome.effects or ticket or logs:
            stages = self._stages
            stages.append((outcome.effects, ticket, time.perf_counter(), logs, permit))
            # Only a stage that heads the queue and is releasable now is released here. A
            # stage behind others waits for them, and a write waits for its batch: the
            # committer signals completion_fd when a batch is durable (_on_durable).
            if len(stages) == 1:
                if not ticket:  # any durable covers it: no committer call to ask
                    self._release(0)
                elif self._covers_at_once:
                    self._release()
        elif permit:
            self.permits.release()
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._end_turn)

    def _end_turn(self) -> None:
        """Every input ready in this loop turn has been handled: write what it produced,
        and arm the timer for the engine's next wake-up."""
        self._turn_scheduled = False
        if self.dirty:  # the frames of stages released within this turn's submits
            self._write_released()
        if self.closed:
            return  # close() flushed; the committer may be gone
        if self._unflushed:
            self._unflushed = False
            self.committer.flush()
        # the engine's next wake-up, asked once per turn here (not through a call of its
        # own: three turns per job) without a clock read (the engine maps wall due times
        # with its last call's clock offset; a read is ~1.3k instructions: a fresh one
        # only to arm); most turns find the armed timer early enough
        wake = self.engine.next_wakeup()
        if wake is None or self.stopped is not None:
            return
        if self._wake_at is not None and self._wake_at <= wake:
            return
        self._arm_wakeup(wake, self.mono_ms())

    def stop_dispatching(self) -> None:
        """Drain: the engine starts nothing new; reports of running executions still count."""
        self.draining = True
        stop = getattr(self.engine, "stop_dispatching", None)
        if stop is not None:
            stop()

    def _on_durable(self) -> None:
        """The committer's completion fd is readable: a batch became durable (or it stopped).
        One committer call drains the fd and reads ``durable``; a stop after it signals
        the fd again, so only a stopped writer needs the longer way."""
        durable = self.committer.completed()
        if durable >= 0:
            self._release(durable)
            if self.dirty:  # written now, after the fsync: not on a later loop turn
                self._write_released()
            return
        self._release()
        self._write_released()
        stopped = self.committer.stopped
        if stopped is not None:
            self._writer_stopped(stopped)

    def _write_released(self) -> None:
        """Write the frames the released stages queued: one write per connection."""
        dirty = self.dirty
        for conn in dirty:
            conn.flush()
        dirty.clear()

    # -- an online compaction switching the journal (tay.server.compaction.compactor) -------
    def suspend_writer(self) -> Any:
        """Drain the committer and stop its thread (the loop is held meanwhile, so nothing
        is submitted); every stage is released. Returns the journal. Raises
        ``WriterStopped`` (and stops serving writes) if the writer stopped."""
        self.loop.remove_reader(self.committer.completion_fd)
        try:
            journal = self.committer.suspend()
        except WriterStopped as stopped:
            self._release()
            self._write_released()
            self._writer_stopped(stopped)
            raise
        self._release()
        self._write_released()
        return journal

    def resume_writer(self, journal: Any) -> None:
        """Write to ``journal`` from now on (the same one, or a new epoch's tail)."""
        self.committer.resume(journal)
        self.loop.add_reader(self.committer.completion_fd, self._on_durable)

    def abandon_writer(self, failure: WriterStopped) -> None:
        """The journal cannot be resumed (an uncertain epoch switch): stop writing for good."""
        self.committer.abandon(failure)
        self._release()
        self._write_released()
        self._writer_stopped(failure)

    # -- ordered release ---------------------------------------------------------------
    def _release(self, durable: int = -1) -> None:
        """Release every stage from the head that ``durable`` covers (-1: ask the committer)."""
        stages = self._stages
        if durable < 0:
            durable = self.committer.durable
        sinks, metrics = self._sinks, self.metrics  # the same for every stage of the call
        while stages:
            head = stages[0]
            if head[_TICKET] > durable:
                stopped = self.committer.stopped
                if stopped is None:
                    return
                durable = self.committer.durable  # final once stopped is set
                if head[_TICKET] > durable:
                    self._writer_stopped(stopped)
                    stages.popleft()
                    self._fail_stage(head)
                continue
            stages.popleft()
            effects, ticket, created, logs, permit = head
            if ticket or self.stopped is None:
                if permit:
                    self.permits.release()
                elapsed = None
                for effect in effects:
                    sink = sinks.get(effect[0])  # every effect is a tuple, conn first
                    if sink is not None:
                        sink(effect)
                    # the enqueue-ack latency of each enqueued reply
                    if metrics is not None and type(effect) is Reply \
                            and effect[2] == "enqueued":  # its type
                        if elapsed is None:
                            elapsed = time.perf_counter() - created
                        metrics.enqueue_ack.observe(elapsed)
                if logs:
                    log_failures(logs)
            else:
                self._fail_stage(head)

    def _writer_stopped(self, error: WriterStopped) -> None:
        if self.stopped is not None:
            return
        self.stopped = error
        if self.on_stopped is not None:
            self.loop.call_soon(self.on_stopped)
        for listener in self._stop_listeners:
            self.loop.call_soon(listener)

    def _fail_stage(self, stage: _Stage) -> None:
        effects, ticket, _, _, permit = stage
        if permit:
            self.permits.release()
        code = "unknown_outcome" if ticket else "unavailable"
        for effect in effects:
            if isinstance(effect, (Reply, Refuse)) and effect.request_id is not None:
                failure = RequestRefused("the journal writer stopped; the outcome is unknown"
                                         if code == "unknown_outcome"
                                         else "the journal writer stopped", code=code)
                self._deliver(Refuse(effect.conn, effect.request_id, failure))
            # Execute / CancelExecution are dropped: their START may not be durable.

    def _deliver(self, effect: Effect) -> None:
        sink = self._sinks.get(effect.conn)
        if sink is not None:
            sink(effect)

    def _refuse_unavailable(self, command: Any) -> None:
        request_id = getattr(command, "request_id", None)
        conn = getattr(command, "conn", None)
        if request_id is not None and conn is not None:
            failure = RequestRefused("the journal writer stopped", code="unavailable")
            self._deliver(Refuse(conn, request_id, failure))
            self._write_released()

    # -- timers ------------------------------------------------------------------------
    def _arm_wakeup(self, wake: int, now: int) -> None:
        """Arm the loop timer for the engine's wake-up at monotonic ``wake`` (ms), earlier
        than the one armed (``_end_turn`` decides). It fires ``WALL_RECHECK_MS`` from now
        at the latest: delayed jobs and schedules fall due on the wall clock, which the
        engine maps to monotonic time with the offset it saw last, and a step of the wall
        clock (NTP, an operator) moves them with nothing else to tell an idle server."""
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        if wake - now > WALL_RECHECK_MS:
            wake = now + WALL_RECHECK_MS
        self._wake_at = wake
        delay = max(0, wake - now) / 1000.0
        self._wake_handle = self.loop.call_later(delay, self.tick)

    def close(self) -> None:
        """The listeners are closed: nothing more reaches the engine (the journal closes
        next, and a command submitted now would fail as a stopped writer)."""
        if self.stopped is None and self._unflushed:
            self._unflushed = False
            self.committer.flush()
        self.closed = True
        self._write_released()
        if self.committer.completion_fd >= 0:
            self.loop.remove_reader(self.committer.completion_fd)
        self.tap = None
        if self._wake_handle is not None:
            self._wake_handle.cancel()
            self._wake_handle = None


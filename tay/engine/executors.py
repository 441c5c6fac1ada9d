"""Executor connections, their task registrations, and live reservations.

All of this is volatile (per connection, per engine run). Selection (protocol.md §6.2):
among connections that registered the task, have spare declared capacity and (for HTTP
sessions) serve the job's queue, the one with the fewest reservations wins, ties by
runtime_id. Settled reservations are remembered (bounded) so that a late report for an
execution that was cancelled, timed out or already completed is recognised and answered
``accepted`` instead of an error the SDK would treat as fatal.

The settled memory holds a 60-bit digest per execution: the hash of the connection's
serial and both ids, in a set and a queue (about 70 bytes each where the ids themselves,
a tuple and the connection cost about 250 and kept a closed connection alive). The hash
of ``str`` is keyed per process, so a client cannot aim at a digest; a made-up pair
matches one by chance with odds under 2**-44 at the default 65,536 entries, and the
answer then is ``accepted``, which changes nothing.

A worker can be told to go *quiet* (Sidekiq's "Quiet"): every connection of its runtime id
keeps running what it holds but is offered nothing new, until it is told otherwise. A quiet
connection is simply left out of ``by_task``, so selection never sees it. The runtime ids
told so are remembered for the engine's run (not durably), so a worker that reconnects
stays quiet; the oldest are forgotten beyond ``QUIET_REMEMBERED``.
"""

from __future__ import annotations

from collections import deque
from itertools import count
from typing import Hashable

from tay._frozen import Record

Conn = Hashable

_DIGEST_MASK = (1 << 60) - 1  # two 30-bit digits: the smallest int object above one digit
QUIET_REMEMBERED = 1_024  # quiet runtime ids kept (a deploy quiets a few and they exit)


def settled_digest(serial: int, reservation_id: str, execution_id: str) -> int:
    return hash((serial, reservation_id, execution_id)) & _DIGEST_MASK


class Reservation(Record):
    __slots__ = ("reservation_id", "execution_id", "conn", "job_id", "queue", "deadline_mono")
    reservation_id: str
    execution_id: str
    conn: Conn
    job_id: bytes
    queue: str
    deadline_mono: int

    def __init__(self, reservation_id: str, execution_id: str, conn: Conn, job_id: bytes,
                 queue: str, deadline_mono: int) -> None:
        self.reservation_id = reservation_id
        self.execution_id = execution_id
        self.conn = conn
        self.job_id = job_id
        self.queue = queue
        self.deadline_mono = deadline_mono


class Executor(Record):
    __slots__ = ("conn", "mode", "runtime_id", "capacity", "queue", "tasks", "reservations",
                 "serial", "quiet")
    conn: Conn
    mode: str
    runtime_id: str
    capacity: int
    queue: str | None
    tasks: set[str]
    reservations: dict[str, Reservation]
    serial: int  # set by ExecutorRegistry.connect: unique in an engine run, never reused
    quiet: bool  # offered nothing new (ExecutorRegistry.set_quiet)

    def __init__(self, conn: Conn, mode: str, runtime_id: str, capacity: int, queue: str | None,
                 tasks: set[str] | None = None,
                 reservations: dict[str, Reservation] | None = None, serial: int = 0) -> None:
        self.conn = conn
        self.mode = mode
        self.runtime_id = runtime_id
        self.capacity = capacity
        self.queue = queue
        self.tasks = set() if tasks is None else tasks  # a new set and dict for each
        self.reservations = {} if reservations is None else reservations
        self.serial = serial
        self.quiet = False

    def has_room(self) -> bool:
        return len(self.reservations) < self.capacity


class ExecutorRegistry:
    def __init__(self, settled_memory: int) -> None:
        self.executors: dict[Conn, Executor] = {}
        self.by_task: dict[str, set[Conn]] = {}
        self.reservations: dict[str, Reservation] = {}
        # digests of settled executions (settled_digest), and the same oldest first
        self._settled: set[int] = set()
        self._settled_order: deque[int] = deque()
        self._settled_memory = settled_memory
        self._serials = count(1)
        self.quiet: dict[str, None] = {}  # runtime ids told to go quiet, oldest first

    def connect(self, executor: Executor) -> None:
        executor.serial = next(self._serials)
        executor.quiet = executor.runtime_id in self.quiet
        self.executors[executor.conn] = executor

    def disconnect(self, conn: Conn) -> Executor | None:
        executor = self.executors.pop(conn, None)
        if executor is not None:
            self.unregister(executor, executor.tasks)
        return executor

    def register(self, executor: Executor, tasks: tuple[str, ...]) -> None:
        for task in tasks:
            executor.tasks.add(task)
            if not executor.quiet:
                self.by_task.setdefault(task, set()).add(executor.conn)

    def unregister(self, executor: Executor, tasks) -> None:
        for task in list(tasks):
            executor.tasks.discard(task)
            self._unlist(executor.conn, task)

    def _unlist(self, conn: Conn, task: str) -> None:
        conns = self.by_task.get(task)
        if conns is not None:
            conns.discard(conn)
            if not conns:
                del self.by_task[task]

    def of_runtime(self, runtime_id: str) -> list[Executor]:
        """The connections of one runtime id (a worker process may hold several)."""
        return [e for e in self.executors.values() if e.runtime_id == runtime_id]

    def set_quiet(self, runtime_id: str, quiet: bool) -> list[Executor]:
        """Offer the connections of ``runtime_id`` nothing new (``quiet``), or offer them
        work again; what they run goes on. Remembered for connections it opens later.
        Returns its connections now."""
        remembered = self.quiet
        remembered.pop(runtime_id, None)
        if quiet:
            remembered[runtime_id] = None
            if len(remembered) > QUIET_REMEMBERED:
                del remembered[next(iter(remembered))]
        executors = self.of_runtime(runtime_id)
        for executor in executors:
            if executor.quiet == quiet:
                continue
            executor.quiet = quiet
            for task in executor.tasks:
                if quiet:
                    self._unlist(executor.conn, task)
                else:
                    self.by_task.setdefault(task, set()).add(executor.conn)
        return executors

    def select(self, task: str, queue: str) -> Executor | None:
        """The eligible executor with the fewest reservations (ties by runtime_id)."""
        best: Executor | None = None
        best_load = 0
        executors = self.executors
        for conn in self.by_task.get(task, ()):
            executor = executors[conn]
            load = len(executor.reservations)
            if load >= executor.capacity or (executor.queue is not None  # has_room(), inline
                                             and executor.queue != queue):
                continue
            if best is None or (load, executor.runtime_id) < (best_load, best.runtime_id):
                best, best_load = executor, load
        return best

    def release(self, reservation: Reservation) -> None:
        """Forget a live reservation and remember it as settled (while its connection is
        open: a closed one sends no more reports)."""
        self.reservations.pop(reservation.reservation_id, None)
        executor = self.executors.get(reservation.conn)
        if executor is None:
            return
        executor.reservations.pop(reservation.reservation_id, None)
        if self._settled_memory:
            settled = self._settled
            digest = settled_digest(executor.serial, reservation.reservation_id,
                                    reservation.execution_id)
            if digest not in settled:  # a digest keeps its place, as in an OrderedDict
                settled.add(digest)
                self._settled_order.append(digest)
                if len(settled) > self._settled_memory:
                    settled.discard(self._settled_order.popleft())

    def live(self, conn: Conn, reservation_id: str, execution_id: str) -> Reservation | None:
        """The in-flight reservation matching both ids on this connection, if any."""
        reservation = self.reservations.get(reservation_id)
        if reservation is None or reservation.conn != conn or reservation.execution_id != execution_id:
            return None
        return reservation

    def was_settled(self, conn: Conn, reservation_id: str, execution_id: str) -> bool:
        executor = self.executors.get(conn)
        return executor is not None and \
            settled_digest(executor.serial, reservation_id, execution_id) in self._settled

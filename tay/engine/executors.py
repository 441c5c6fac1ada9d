"""Executor connections, their task registrations, and live reservations.

All of this is volatile (per connection, per engine run). Selection (protocol.md §6.2):
among connections that registered the task, have spare declared capacity and (for HTTP
sessions) serve the job's queue, the one with the fewest reservations wins, ties by
runtime_id. Settled reservations are remembered (bounded) so that a late report for an
execution that was cancelled, timed out or already completed is recognised and answered
``accepted`` instead of an error the SDK would treat as fatal.
"""

from __future__ import annotations

from collections import deque
from typing import Hashable

from tay._frozen import Record

Conn = Hashable


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
    __slots__ = ("conn", "mode", "runtime_id", "capacity", "queue", "tasks", "reservations")
    conn: Conn
    mode: str
    runtime_id: str
    capacity: int
    queue: str | None
    tasks: set[str]
    reservations: dict[str, Reservation]

    def __init__(self, conn: Conn, mode: str, runtime_id: str, capacity: int, queue: str | None,
                 tasks: set[str] | None = None,
                 reservations: dict[str, Reservation] | None = None) -> None:
        self.conn = conn
        self.mode = mode
        self.runtime_id = runtime_id
        self.capacity = capacity
        self.queue = queue
        self.tasks = set() if tasks is None else tasks  # a new set and dict for each
        self.reservations = {} if reservations is None else reservations

    def has_room(self) -> bool:
        return len(self.reservations) < self.capacity


class ExecutorRegistry:
    def __init__(self, settled_memory: int) -> None:
        self.executors: dict[Conn, Executor] = {}
        self.by_task: dict[str, set[Conn]] = {}
        self.reservations: dict[str, Reservation] = {}
        # settled reservations, oldest first: a dict and a queue of its keys hold them in
        # less than half the memory of an OrderedDict (65,536 by default)
        self._settled: dict[str, tuple[Conn, str]] = {}
        self._settled_order: deque[str] = deque()
        self._settled_memory = settled_memory

    def connect(self, executor: Executor) -> None:
        self.executors[executor.conn] = executor

    def disconnect(self, conn: Conn) -> Executor | None:
        executor = self.executors.pop(conn, None)
        if executor is not None:
            self.unregister(executor, executor.tasks)
        return executor

    def register(self, executor: Executor, tasks: tuple[str, ...]) -> None:
        for task in tasks:
            executor.tasks.add(task)
            self.by_task.setdefault(task, set()).add(executor.conn)

    def unregister(self, executor: Executor, tasks) -> None:
        for task in list(tasks):
            executor.tasks.discard(task)
            conns = self.by_task.get(task)
            if conns is not None:
                conns.discard(executor.conn)
                if not conns:
                    del self.by_task[task]

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
        """Forget a live reservation and remember it as settled."""
        self.reservations.pop(reservation.reservation_id, None)
        executor = self.executors.get(reservation.conn)
        if executor is not None:
            executor.reservations.pop(reservation.reservation_id, None)
        if self._settled_memory:
            settled, key = self._settled, reservation.reservation_id
            if key not in settled:  # a key keeps its place, as in an OrderedDict
                self._settled_order.append(key)
            settled[key] = (reservation.conn, reservation.execution_id)
            while len(settled) > self._settled_memory:
                del settled[self._settled_order.popleft()]

    def live(self, conn: Conn, reservation_id: str, execution_id: str) -> Reservation | None:
        """The in-flight reservation matching both ids on this connection, if any."""
        reservation = self.reservations.get(reservation_id)
        if reservation is None or reservation.conn != conn or reservation.execution_id != execution_id:
            return None
        return reservation

    def was_settled(self, conn: Conn, reservation_id: str, execution_id: str) -> bool:
        return self._settled.get(reservation_id) == (conn, execution_id)

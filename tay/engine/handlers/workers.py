"""Executor side: hello/session, task registration, and execution reports (protocol.md §6).

Pairing (§6.4): a report must name a live reservation of the same connection with the
same execution id. A report for an execution this engine settled already (cancelled,
timed out, or completed first) is answered ``accepted``: the SDK treats an error reply to
its events as fatal. Anything else is ``unknown_execution``.
"""

from __future__ import annotations

from typing import Any

from tay.engine.commands import MODES, Connect, Disconnect, Failed, RegisterTasks, Started, Succeeded, UnregisterTasks
from tay.engine.validation.completion import check_execution_ids, check_failure, check_result
from tay.engine.effects import Outcome, Reply
from tay.engine.executors import Executor, Reservation
from tay.engine.validation.ids import is_identifier
from tay.engine.handlers.producer import ProducerCommands
from tay.failures import RequestRefused
from tay.engine.state import finish_outcome
from tay.storage import events as ev
from tay.storage.events.operations import failure_recorded

MAX_CAPACITY = 65_535
_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__


def _key_ok(name: Any) -> bool:
    return type(name) is str and "\x00" not in name and 1 <= len(name.encode("utf-8", "surrogatepass")) <= 255


class WorkerCommands(ProducerCommands):
    def _connect(self, cmd: Connect, now_ms: int, mono_ms: int, out: Outcome) -> None:
        if cmd.conn in self.executors.executors:
            raise RequestRefused("hello was already received on this connection", code="already_hello")
        if cmd.mode not in MODES:
            raise RequestRefused(f"mode must be one of {', '.join(MODES)}", code="invalid_hello", field="mode")
        if not is_identifier(cmd.runtime_id):
            raise RequestRefused("runtime_id must be 1..128 bytes without NUL", code="invalid_hello",
                                 field="runtime_id")
        capacity = cmd.capacity
        low = 0 if cmd.mode == "client" else 1
        high = 0 if cmd.mode == "client" else MAX_CAPACITY
        if type(capacity) is not int or not low <= capacity <= high:
            raise RequestRefused(f"max_concurrency must be {low}..{high} in {cmd.mode} mode",
                                 code="invalid_hello", field="max_concurrency")
        if cmd.queue is not None and not _key_ok(cmd.queue):
            raise RequestRefused("queue must be 1..255 bytes without NUL", code="invalid_worker", field="queue")
        self.executors.connect(Executor(cmd.conn, cmd.mode, cmd.runtime_id, capacity, cmd.queue))
        self._reply(out, cmd.conn, cmd.request_id, "hello_ok", mode=cmd.mode, max_concurrency=capacity)

    def _disconnect(self, cmd: Disconnect, now_ms: int, mono_ms: int, out: Outcome) -> None:
        executor = self.executors.disconnect(cmd.conn)
        if executor is None:
            return
        for reservation in list(executor.reservations.values()):
            self._interrupt(reservation, now_ms, out)
        self._dispatch(now_ms, mono_ms, out)

    def _interrupt(self, reservation: Reservation, now_ms: int, out: Outcome) -> None:
        """Settle a lost execution: interrupted (diag 7), retryable at the same attempt."""
        self._release(reservation)
        entry = self.jobs[reservation.job_id]
        self._finish(entry, ev.INTERRUPTED, ev.DIAG_INTERRUPTED, now_ms, out)

    def _executor_for_tasks(self, conn, tasks) -> tuple[Executor, tuple[str, ...]]:
        executor = self.executors.executors.get(conn)
        if executor is None:
            raise RequestRefused("send hello first", code="hello_required")
        if executor.mode == "client":
            raise RequestRefused("a client-mode connection cannot execute tasks",
                                 code="client_cannot_execute")
        if not isinstance(tasks, (list, tuple)):
            raise RequestRefused("tasks must be an array of task keys", code="invalid_tasks")
        if len(tasks) > self.config.max_tasks_per_connection:
            raise RequestRefused(f"at most {self.config.max_tasks_per_connection} tasks per message",
                                 code="invalid_tasks")
        for index, name in enumerate(tasks):
            if not _key_ok(name):
                raise RequestRefused("task keys must be 1..255 bytes without NUL",
                                     code="invalid_tasks", field=f"tasks[{index}]")
        if len(set(tasks)) != len(tasks):
            raise RequestRefused("tasks contains duplicates", code="invalid_tasks")
        return executor, tuple(tasks)

    def _register(self, cmd: RegisterTasks, now_ms: int, mono_ms: int, out: Outcome) -> None:
        executor, tasks = self._executor_for_tasks(cmd.conn, cmd.tasks)
        self.executors.register(executor, tasks)
        self._reply(out, cmd.conn, cmd.request_id, "tasks_registered", tasks=list(tasks))
        self._dispatch(now_ms, mono_ms, out)

    def _unregister(self, cmd: UnregisterTasks, now_ms: int, mono_ms: int, out: Outcome) -> None:
        executor, tasks = self._executor_for_tasks(cmd.conn, cmd.tasks)
        self.executors.unregister(executor, tasks)
        self._reply(out, cmd.conn, cmd.request_id, "tasks_unregistered", tasks=list(tasks))

    def _paired(self, cmd) -> Reservation | None:
        """The live reservation a report names; None if it names an already settled one."""
        reservation_id, execution_id = cmd.reservation_id, cmd.execution_id
        if type(reservation_id) is str and type(execution_id) is str:
            # the common case first: ids equal to a live reservation's own tokens are
            # identifiers, so checking them again could refuse nothing
            reservation = self.executors.reservations.get(reservation_id)
            if reservation is not None and reservation.conn == cmd.conn \
                    and reservation.execution_id == execution_id:
                return reservation
        check_execution_ids(reservation_id, execution_id)
        reservation = self.executors.live(cmd.conn, cmd.reservation_id, cmd.execution_id)
        if reservation is not None:
            return reservation
        if self.executors.was_settled(cmd.conn, cmd.reservation_id, cmd.execution_id):
            return None
        raise RequestRefused("no live execution matches these ids on this connection",
                             code="unknown_execution")

    def _started(self, cmd: Started, now_ms: int, mono_ms: int, out: Outcome) -> None:
        conn, request_id = cmd.conn, cmd.request_id
        # ``_paired``'s common case, inline (one call less per job); anything else asks it
        reservation_id, execution_id = cmd.reservation_id, cmd.execution_id
        reservation = self.executors.reservations.get(reservation_id) \
            if type(reservation_id) is str and type(execution_id) is str else None
        if reservation is None or reservation.conn != conn \
                or reservation.execution_id != execution_id:
            self._paired(cmd)
        if conn is not None or request_id is not None:  # _reply, inline
            out.effects.append(_new_tuple(Reply, (conn, request_id, "accepted", {})))

    def _succeeded(self, cmd: Succeeded, now_ms: int, mono_ms: int, out: Outcome) -> None:
        # ``_paired``'s common case, inline (one call less per job); anything else asks it
        reservation_id, execution_id = cmd.reservation_id, cmd.execution_id
        reservation = self.executors.reservations.get(reservation_id) \
            if type(reservation_id) is str and type(execution_id) is str else None
        if reservation is None or reservation.conn != cmd.conn \
                or reservation.execution_id != execution_id:
            reservation = self._paired(cmd)
        if reservation is not None:
            result = cmd.result
            limit = self.config.result_bytes
            if result is not None or limit < 4:  # a nil result (4 bytes of JSON) fits
                check_result(result, limit)
            entry = self.jobs[reservation.job_id]
            # ``_release(reservation)``, inline: its entry is the one just looked up
            self.executors.release(reservation)
            # ``executions_ended(queue)``, inline (the success's hot path)
            executing, queue = self._executing, reservation.queue
            left = executing[queue] - 1
            if left:
                executing[queue] = left
            else:
                del executing[queue]
            if entry.reservation_id == reservation.reservation_id:
                entry.reservation_id = None
            if result is not None or entry.volatile or self.epoch is None or not self.fused \
                    or not self._succeed_fused(entry, now_ms, out):  # tay.engine.epoch
                # the result first, then the finish, in one batch: a batch cut between
                # them leaves the job executing (run again), never completed without its
                # result (docs/engine.md, "Results")
                job = entry.state
                self._commit(entry, ev.result_recorded(job.id, now_ms, job.revision, result),
                             entry.volatile, out)
                self._finish(entry, ev.SUCCESS, None, now_ms, out)
        conn, request_id = cmd.conn, cmd.request_id
        if conn is not None or request_id is not None:  # _reply, inline
            out.effects.append(_new_tuple(Reply, (conn, request_id, "accepted", {})))
        self._dispatch(now_ms, mono_ms, out)

    def _failed(self, cmd: Failed, now_ms: int, mono_ms: int, out: Outcome) -> None:
        reservation = self._paired(cmd)
        if reservation is not None:
            error = check_failure(cmd.error, self.config.error_bytes)
            entry = self.jobs[reservation.job_id]
            self._release(reservation)
            # the details first, then the finish, in one batch: a batch cut between them
            # leaves the job executing (run again), never finished by this failure without
            # its details (docs/engine.md, "Results")
            job = entry.state
            self._commit(entry, failure_recorded(job.id, now_ms, job.revision, error),
                         entry.volatile, out)
            self._finish(entry, ev.WORKER_FAILURE, ev.DIAG_ERROR_RETURN, now_ms, out)
            job = entry.state
            self.activity.failure(now_ms, job.id, entry.queue, entry.task, job.attempt,
                                  finish_outcome(job), error)
        self._reply(out, cmd.conn, cmd.request_id, "accepted")
        self._dispatch(now_ms, mono_ms, out)

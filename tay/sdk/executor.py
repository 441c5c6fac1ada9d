"""Running ``execute`` messages: bounded concurrency, threads for sync, the loop for async.

Each execution reports ``started`` and then exactly one of ``succeeded`` (with a result
whose JSON is at most ``max_result_bytes``) or ``failed`` (with an error object of at most
``max_error_bytes``), on the connection that delivered it: the engine only accepts a
report from that connection. ``cancel_execution`` cancels async work cooperatively; a
sync function cannot be interrupted safely, so it finishes and the engine's cancellation
fence decides whether its report still counts.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tay.errors import ConnectionLost, ProtocolError, ResultTooLarge, TaskNotRegistered, ValidationError
from tay.sdk.connection import Link
from tay.sdk.task import Task
from tay.sdk.wire import encoded_json_size, json_bytes, plain_json, report_ids

MAX_ERROR_TYPE_CHARS = 128


def _required_id(message: Mapping[str, Any], field: str) -> str:
    value = message.get(field)
    if type(value) is not str or not value:
        raise ProtocolError(f"Tay sent {message.get('type')!r} without a non-empty string {field}")
    return value


def bounded_error(exc: BaseException, *, limit: int, include_traceback: bool) -> dict[str, Any]:
    """``{type, message, traceback?}`` for ``exc``, shortened until its JSON fits ``limit``."""
    error: dict[str, Any] = {
        "type": type(exc).__name__[:MAX_ERROR_TYPE_CHARS],
        "message": str(exc) or type(exc).__name__,
    }
    if include_traceback:
        error["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    for field in ("traceback", "message"):
        while field in error and encoded_json_size(error) > limit:
            text = error[field]
            if len(text) <= 16:
                del error[field]
                break
            # keep the end of a traceback (the raising frame), the start of a message
            half = len(text) // 2
            error[field] = "…" + text[-half:] if field == "traceback" else text[:half] + "…"
    if encoded_json_size(error) > limit:
        return {"type": error["type"][:32], "message": "error details exceeded the size limit"}
    return error


class _Running:
    """One accepted execution: the future that finishes it (a task for async functions,
    the thread pool's future for sync ones) and where its report goes."""

    __slots__ = ("future", "link", "synchronous", "task", "ids", "encoded_ids")

    def __init__(self, future: asyncio.Future[Any] | None, link: Link, synchronous: bool, task: Task[Any, Any],
                 ids: dict[str, str], encoded_ids: tuple[bytes, bytes]) -> None:
        self.future: asyncio.Future[Any] = future  # type: ignore[assignment]  # set at once when None
        self.link = link
        self.synchronous = synchronous
        self.task = task
        self.ids = ids
        self.encoded_ids = encoded_ids  # for both reports (wire.report_ids)


# Results of these types are never awaitable: no ABC check for them.
_PLAIN_RESULTS = frozenset({dict, list, str, int, float, bool, type(None)})
_CANCELLED_ERROR = {"type": "CancelledError", "message": "the execution was cancelled", "cancelled": True}


class Executor:
    """Accepts executions for one ``Tay`` instance.

    ``started`` is written as the ``execute`` arrives; an async function runs in one task
    that writes ``succeeded`` (the result encoded once) or ``failed`` in the step that
    finishes it; a sync one runs in a pool thread, its future's done callback reports. Reports do
    not wait for the socket to drain: at most ``capacity`` executions (two reports each)
    are ever outstanding.
    """

    def __init__(
        self,
        *,
        capacity: int,
        lookup: Callable[[str], Task[Any, Any] | None],
        accepts_work: Callable[[], bool],
        max_result_bytes: int,
        max_error_bytes: int,
        include_traceback: bool,
    ) -> None:
        self.capacity = capacity
        self._lookup = lookup
        self._accepts_work = accepts_work
        self.max_result_bytes = max_result_bytes
        self.max_error_bytes = max_error_bytes
        self.include_traceback = include_traceback
        self._running: dict[str, _Running] = {}
        self._threads: ThreadPoolExecutor | None = None

    @property
    def active(self) -> int:
        return len(self._running)

    def handle(self, link: Link, message: dict[str, Any]) -> None:
        """Entry point for ``execute``/``cancel_execution``; never blocks the read loop."""
        if message["type"] == "cancel_execution":
            running = self._running.get(_required_id(message, "execution_id"))
            if running is not None and not running.synchronous:
                running.future.cancel()
            return
        self._accept(link, message)

    def _accept(self, link: Link, message: dict[str, Any]) -> None:
        execution_id = message.get("execution_id")
        reservation_id = message.get("reservation_id")
        job_id = message.get("job_id")
        if not (type(execution_id) is str and execution_id and type(reservation_id) is str and reservation_id
                and type(job_id) is str and job_id):
            for field in ("execution_id", "reservation_id", "job_id"):
                _required_id(message, field)  # raises, naming the field
        ids = {"reservation_id": reservation_id, "execution_id": execution_id, "job_id": job_id}
        task_name = message.get("task", message.get("task_name"))
        if type(task_name) is not str:
            raise ProtocolError("Tay sent 'execute' without a string task")
        encoded_ids = report_ids(ids)
        if execution_id in self._running:  # duplicate delivery: confirm, do not run twice
            _report(link, "started", encoded_ids)
            return
        arguments = message.get("args", {})
        task = self._lookup(task_name)
        if task is None or type(arguments) is not dict or len(self._running) >= self.capacity \
                or not self._accepts_work():
            _report_failure(link, ids, self._error(self._refusal(task_name, arguments)))
            return
        loop = link.loop
        if task.is_async:
            try:
                coroutine = task.call_with(arguments)
            except Exception as exc:  # noqa: BLE001 - arguments that do not fit the function
                _report(link, "started", encoded_ids)
                _report_failure(link, ids, self._error(exc))
                return
            running = _Running(None, link, False, task, ids, encoded_ids)
            running.future = loop.create_task(self._run(execution_id, running, coroutine),
                                              name=f"tay-execution-{execution_id}")
            self._running[execution_id] = running
        else:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.capacity, thread_name_prefix="tay-task")
            running = _Running(loop.run_in_executor(self._threads, task.call_with, arguments), link, True, task, ids,
                               encoded_ids)
            self._follow(execution_id, running)
        # Written after the task is created: its first step runs before the write goes out,
        # so a quick execution's succeeded leaves with its started in one write.
        _report(link, "started", encoded_ids)

    async def _run(self, execution_id: str, running: _Running, coroutine: Any) -> None:
        """An async execution: its report is written in the step that finishes it."""
        try:
            result = await coroutine
            while type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
                result = await result  # a function handed back an awaitable
        except asyncio.CancelledError:
            self._forget(execution_id, running)
            _report_failure(running.link, running.ids, dict(_CANCELLED_ERROR))
            raise
        except Exception as exc:  # noqa: BLE001 - a task's exception becomes its failure report
            self._forget(execution_id, running)
            _report_failure(running.link, running.ids, self._error(exc))
            return
        self._forget(execution_id, running)
        self._succeed(running, result)

    def _forget(self, execution_id: str, running: _Running) -> None:
        if self._running.get(execution_id) is running:
            del self._running[execution_id]

    def _follow(self, execution_id: str, running: _Running) -> None:
        self._running[execution_id] = running
        running.future.add_done_callback(lambda done: self._finished(execution_id, running, done))

    def _finished(self, execution_id: str, running: _Running, future: asyncio.Future[Any]) -> None:
        """A sync execution's thread finished (or the awaitable it handed back did)."""
        self._forget(execution_id, running)
        if future.cancelled():
            _report_failure(running.link, running.ids, dict(_CANCELLED_ERROR))
            return
        error = future.exception()
        if error is not None:
            _report_failure(running.link, running.ids, self._error(error))
            return
        result = future.result()
        if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
            # a function handed back an awaitable: its outcome is the execution's
            running.future = asyncio.ensure_future(result)
            self._follow(execution_id, running)
            return
        self._succeed(running, result)

    def _succeed(self, running: _Running, result: Any) -> None:
        if result is None:  # the common result of a job: nothing to check or encode
            _report(running.link, "succeeded", running.encoded_ids, b"null")
            return
        try:
            encoded = json_bytes(plain_json(result))
            if len(encoded) > self.max_result_bytes:
                raise ResultTooLarge(f"task {running.task.name!r} returned {len(encoded)} bytes of JSON; "
                                     f"the limit is {self.max_result_bytes}")
        except Exception as exc:  # noqa: BLE001 - an unencodable result is the task's failure
            _report_failure(running.link, running.ids, self._error(exc))
            return
        _report(running.link, "succeeded", running.encoded_ids, encoded)

    def _refusal(self, task_name: str, arguments: Any) -> BaseException:
        """Why an execution is refused (``_accept`` found that it is)."""
        if not self._accepts_work():
            return TaskNotRegistered("client mode does not execute tasks")
        if self._lookup(task_name) is None:
            return TaskNotRegistered(f"task {task_name!r} is not registered in this process")
        if not isinstance(arguments, Mapping):
            return ValidationError("execute args must be a JSON object")
        return RuntimeError(f"executor capacity of {self.capacity} exceeded")

    def _error(self, exc: BaseException) -> dict[str, Any]:
        return bounded_error(exc, limit=self.max_error_bytes, include_traceback=self.include_traceback)

    def link_lost(self, link: Link) -> None:
        """Forget executions of a lost connection: Tay will run them again elsewhere."""
        for execution_id, running in list(self._running.items()):
            if running.link is link:
                if not running.synchronous:
                    running.future.cancel()
                self._running.pop(execution_id, None)

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for running executions; True when none is left."""
        futures = [running.future for running in self._running.values()]
        if futures:
            await asyncio.wait(futures, timeout=timeout)
        return not self._running

    def shutdown(self) -> None:
        """Cancel async executions; sync ones finish in their threads, unreported."""
        running, self._running = list(self._running.values()), {}
        for execution in running:
            execution.future.cancel()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None


# The engine treats an unreported execution on a lost connection as interrupted and runs
# it again, so a report that cannot be sent is dropped, not retried.

def _report(link: Link, message_type: str, ids: tuple[bytes, bytes], result_json: bytes | None = None) -> None:
    try:
        link.send_report(message_type, ids, result_json)
    except ConnectionLost:
        pass


def _report_failure(link: Link, ids: dict[str, str], error: dict[str, Any]) -> None:
    try:
        link.send_event("failed", {**ids, "error": error})
    except ConnectionLost:
        pass

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
import contextlib
import inspect
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tay.errors import ConnectionLost, ProtocolError, ResultTooLarge, TaskNotRegistered, ValidationError
from tay.sdk.connection import Link
from tay.sdk.task import Task
from tay.sdk.wire import encoded_json_size, normalize_json

MAX_ERROR_TYPE_CHARS = 128


@dataclass
class _Running:
    task: asyncio.Task[None]
    link: Link
    synchronous: bool


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


class Executor:
    """Accepts executions for one ``Tay`` instance."""

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
                running.task.cancel()
            return
        self._accept(link, message)

    def _accept(self, link: Link, message: dict[str, Any]) -> None:
        execution_id = _required_id(message, "execution_id")
        ids = {"reservation_id": _required_id(message, "reservation_id"), "execution_id": execution_id,
               "job_id": _required_id(message, "job_id")}
        task_name = message.get("task", message.get("task_name"))
        if type(task_name) is not str:
            raise ProtocolError("Tay sent 'execute' without a string task")
        if execution_id in self._running:  # duplicate delivery: confirm, do not run twice
            self._spawn_report(link, "started", ids)
            return
        refusal = self._refusal(task_name, message.get("args", {}))
        if refusal is not None:
            self._spawn_report(link, "failed", {**ids, "error": self._error(refusal)})
            return
        task = self._lookup(task_name)
        assert task is not None
        synchronous = not task.is_async
        runner = asyncio.create_task(self._run(link, ids, task, dict(message.get("args", {})), synchronous),
                                     name=f"tay-execution-{execution_id}")
        self._running[execution_id] = _Running(runner, link, synchronous)
        runner.add_done_callback(lambda _: self._running.pop(execution_id, None))

    def _refusal(self, task_name: str, arguments: Any) -> BaseException | None:
        if not self._accepts_work():
            return TaskNotRegistered("client mode does not execute tasks")
        if self._lookup(task_name) is None:
            return TaskNotRegistered(f"task {task_name!r} is not registered in this process")
        if not isinstance(arguments, Mapping):
            return ValidationError("execute args must be a JSON object")
        if len(self._running) >= self.capacity:
            return RuntimeError(f"executor capacity of {self.capacity} exceeded")
        return None

    def _error(self, exc: BaseException) -> dict[str, Any]:
        return bounded_error(exc, limit=self.max_error_bytes, include_traceback=self.include_traceback)

    async def _invoke(self, task: Task[Any, Any], arguments: dict[str, Any], synchronous: bool) -> Any:
        if synchronous:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.capacity, thread_name_prefix="tay-task")
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._threads, task.call_with, arguments)
        else:
            result = task.call_with(arguments)
        while inspect.isawaitable(result):  # a sync function may hand back an awaitable
            result = await result
        result = normalize_json(result)
        size = encoded_json_size(result)
        if size > self.max_result_bytes:
            raise ResultTooLarge(f"task {task.name!r} returned {size} bytes of JSON; the limit is {self.max_result_bytes}")
        return result

    async def _run(self, link: Link, ids: dict[str, str], task: Task[Any, Any], arguments: dict[str, Any], synchronous: bool) -> None:
        await self._report(link, "started", ids)
        try:
            result = await self._invoke(task, arguments, synchronous)
        except asyncio.CancelledError:
            error = {"type": "CancelledError", "message": "the execution was cancelled", "cancelled": True}
            await self._report(link, "failed", {**ids, "error": error})
            raise
        except Exception as exc:  # noqa: BLE001 - a task's exception becomes its failure report
            await self._report(link, "failed", {**ids, "error": self._error(exc)})
        else:
            await self._report(link, "succeeded", {**ids, "result": result})

    @staticmethod
    async def _report(link: Link, message_type: str, fields: dict[str, Any]) -> None:
        # The engine treats an unreported execution on a lost connection as interrupted
        # and runs it again, so a report that cannot be sent is dropped, not retried.
        with contextlib.suppress(ConnectionLost, OSError):
            await link.send_event(message_type, fields)

    def _spawn_report(self, link: Link, message_type: str, fields: dict[str, Any]) -> None:
        asyncio.create_task(self._report(link, message_type, fields))

    def link_lost(self, link: Link) -> None:
        """Forget executions of a lost connection: Tay will run them again elsewhere."""
        for execution_id, running in list(self._running.items()):
            if running.link is link:
                if not running.synchronous:
                    running.task.cancel()
                self._running.pop(execution_id, None)

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for running executions; True when none is left."""
        tasks = [running.task for running in self._running.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return not self._running

    def shutdown(self) -> None:
        """Cancel async executions; sync ones finish in their threads, unreported."""
        for running in self._running.values():
            running.task.cancel()
        self._running.clear()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None

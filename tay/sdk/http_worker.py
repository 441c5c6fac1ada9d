"""``TayHTTPWorker``: a remote worker over HTTP long polling (same TLS rules as TayHTTP).

The loop claims forever, also while tasks run: the server ends a session after 60 s
without a claim. When the session is gone (``unknown_worker``) the worker registers again
and carries on; jobs of the lost session are recovered by the server and run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar, overload

from tay.errors import ConnectionLost, ProtocolError, ServerError, ValidationError
from tay.sdk.handles import quote_segment
from tay.sdk.http import TayHTTP
from tay.sdk.options import DURABILITY_MODES, Durability, TaskConfig, check_backoff, check_durability, check_retries
from tay.sdk.task import Task, TaskDecorator, register_task
from tay.sdk.wire import json_bytes, plain_json, validate_task_name

log = logging.getLogger("tay.sdk")

P = ParamSpec("P")
R = TypeVar("R")

MAX_HTTP_WORKER_CAPACITY = 256
MIN_WORKER_REQUEST_TIMEOUT = 25  # above the server's 20 s long-poll window
RETRY_DELAY_SECONDS = 1.0
WORKER_TOKEN_LENGTH = 43
MAX_RESULT_BYTES = 65_536
MAX_ERROR_TYPE_CHARS = 128
MAX_ERROR_MESSAGE_CHARS = 1_024

__all__ = ["TayHTTPWorker", "DURABILITY_MODES"]


class TayHTTPWorker(TayHTTP):
    """Runs registered tasks for one queue by long-polling ``POST /queues/:queue/claim``."""

    def __init__(self, base_url: str, *, queue: str = "default", capacity: int = 1,
                 runtime_id: str | None = None, **transport_options: Any) -> None:
        super().__init__(base_url, **transport_options)
        if self.request_timeout < MIN_WORKER_REQUEST_TIMEOUT:
            raise ValidationError(f"HTTP workers need request_timeout >= {MIN_WORKER_REQUEST_TIMEOUT} s "
                                  "(claims long-poll for up to 20 s)")
        if type(capacity) is not int or not 1 <= capacity <= MAX_HTTP_WORKER_CAPACITY:
            raise ValidationError(f"capacity must be an integer in 1..{MAX_HTTP_WORKER_CAPACITY}, got {capacity!r}")
        self.queue = validate_task_name(queue, what="queue")
        self.capacity = capacity
        self.runtime_id = runtime_id or f"http-worker-{uuid.uuid4().hex}"
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._token: str | None = None
        self._executions: dict[str, asyncio.Task[None]] = {}
        self._execution_is_sync: dict[str, bool] = {}
        self._threads: ThreadPoolExecutor | None = None

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        return self._tasks.copy()

    @overload
    def task(self, function: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def task(self, function: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(self, function: None = None, *, name: str | None = None, retries: int | None = None,
             backoff: str | None = None, durability: Durability | None = None) -> TaskDecorator: ...

    def task(self, function: Callable[..., Any] | None = None, *, name: str | None = None,
             retries: int | None = None, backoff: str | None = None,
             durability: Durability | None = None) -> Task[Any, Any] | TaskDecorator:
        """Register a handler: ``@worker.task`` or ``@worker.task(name=..., ...)``."""
        check_retries(retries, upper=65_534)
        check_backoff(backoff)
        check_durability(durability)
        config = TaskConfig(retries=retries, backoff=backoff, durability=durability)

        def register(candidate: Callable[..., Any]) -> Task[Any, Any]:
            return register_task(self, self._tasks, candidate, name=name, config=config)[0]

        return register if function is None else register(function)

    # -- session -------------------------------------------------------------------------

    async def register(self) -> None:
        """Open a worker session (``POST /workers``); does not claim anything yet."""
        if self._token is not None:
            return
        if not self._tasks:
            raise ValidationError("register at least one task (@worker.task) before starting the worker")
        reply = await self._request("POST", "/workers", {"runtime_id": self.runtime_id, "tasks": list(self._tasks),
                                                         "capacity": self.capacity, "queue": self.queue})
        token = reply.get("worker_token")
        if type(token) is not str or len(token) != WORKER_TOKEN_LENGTH:
            raise ProtocolError("Tay did not return a valid 43-character worker_token")
        self._token = token

    async def start(self) -> None:
        """Deprecated: use ``register()`` or ``serve_forever()``."""
        warnings.warn("TayHTTPWorker.start() only registers; use register() or serve_forever()",
                      DeprecationWarning, stacklevel=2)
        await self.register()

    async def run(self) -> None:
        """Deprecated alias of ``serve_forever()``."""
        warnings.warn("TayHTTPWorker.run() is deprecated; use serve_forever()", DeprecationWarning, stacklevel=2)
        await self.serve_forever()

    async def close(self) -> None:
        """End the session (``DELETE /workers``), cancel async executions, close connections."""
        for execution in self._executions.values():
            execution.cancel()
        token, self._token = self._token, None
        if token is not None:
            with contextlib.suppress(ConnectionLost, ServerError, ProtocolError):
                await self._request("DELETE", "/workers", headers={"Authorization": f"Bearer {token}"})
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None
        await super().close()

    async def serve_forever(self) -> None:
        """Register, then claim and run jobs until cancelled; always closes the session."""
        await self.register()
        try:
            await self._claim_loop()
        finally:
            await self.close()

    async def _worker_request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._token is None:
            raise ConnectionLost("the HTTP worker has no session; call register() first")
        return await self._request(method, path, body, headers={"Authorization": f"Bearer {self._token}"})

    async def _claim_loop(self) -> None:

        path = f"/queues/{quote_segment(self.queue)}/claim"
        while True:
            try:
                message = await self._worker_request("POST", path)
            except ConnectionLost:
                await asyncio.sleep(RETRY_DELAY_SECONDS)
                continue
            except ServerError as exc:
                if exc.code == "unknown_worker":  # session expired: open a new one
                    self._token = None
                    await self.register()
                    continue
                if exc.code == "claim_in_progress":
                    await asyncio.sleep(RETRY_DELAY_SECONDS)
                    continue
                raise
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "execute":
            execution_id = message.get("execution_id")
            if type(execution_id) is not str or type(message.get("reservation_id")) is not str:
                raise ProtocolError("Tay sent 'execute' without execution_id/reservation_id")
            if execution_id in self._executions:
                return
            declared = self._tasks.get(message.get("task"))  # type: ignore[arg-type]
            self._execution_is_sync[execution_id] = declared is not None and not declared.is_async
            runner = asyncio.create_task(self._execute(message))
            self._executions[execution_id] = runner
            runner.add_done_callback(lambda done: self._finished(execution_id, done))
        elif kind == "cancel_execution":
            execution_id = message.get("execution_id")
            if type(execution_id) is not str:
                raise ProtocolError("Tay sent 'cancel_execution' without execution_id")
            running = self._executions.get(execution_id)
            if running is not None and not self._execution_is_sync.get(execution_id, False):
                running.cancel()
        elif message:
            raise ProtocolError(f"Tay sent an unexpected worker event {kind!r}")

    def _finished(self, execution_id: str, done: asyncio.Task[None]) -> None:
        self._executions.pop(execution_id, None)
        self._execution_is_sync.pop(execution_id, None)
        if not done.cancelled() and done.exception() is not None:
            log.warning("could not report execution %s to Tay: %s", execution_id, done.exception())

    async def _invoke(self, task: Task[Any, Any], arguments: Any) -> Any:
        if task.is_async:
            result = task.call_with(arguments)
        else:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.capacity, thread_name_prefix="tay-http-task")
            result = await asyncio.get_running_loop().run_in_executor(self._threads, task.call_with, arguments)
        while inspect.isawaitable(result):
            result = await result
        result = plain_json(result)
        if len(json_bytes(result)) > MAX_RESULT_BYTES:
            raise ValidationError(f"task {task.name!r} returned more than {MAX_RESULT_BYTES} bytes of JSON")
        return result

    async def _execute(self, message: dict[str, Any]) -> None:
        context = {"reservation_id": message["reservation_id"], "execution_id": message["execution_id"]}
        task = self._tasks.get(message.get("task"))  # type: ignore[arg-type]
        if task is None:
            error = {"type": "TaskNotRegistered", "message": f"task {message.get('task')!r} is not registered here"}
            await self._worker_request("POST", "/workers/complete", {**context, "outcome": "failure", "error": error})
            return
        await self._worker_request("POST", "/workers/started", context)
        try:
            completion = {**context, "outcome": "success", "result": await self._invoke(task, message.get("args", {}))}
        except asyncio.CancelledError:
            completion = {**context, "outcome": "failure", "error": {"type": "CancelledError", "message": "cancelled"}}
        except Exception as exc:  # noqa: BLE001 - a task's exception becomes its failure report
            completion = {**context, "outcome": "failure", "error": {
                "type": type(exc).__name__[:MAX_ERROR_TYPE_CHARS],
                "message": (str(exc) or type(exc).__name__)[:MAX_ERROR_MESSAGE_CHARS]}}
        await self._worker_request("POST", "/workers/complete", completion)

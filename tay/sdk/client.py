"""``Tay``: the Unix-socket producer and executor, API-compatible with tay-client 1.4.0.

Modes: ``embedded`` (default) submits jobs and runs registered tasks, ``client`` only
submits, ``worker`` only runs. A supervisor task keeps one connection open and reconnects
with backoff (0.05 s doubling to 2 s by default). Each new connection is bootstrapped
from *desired state* kept here: ``hello``, every retained schedule declaration (sorted by
id), then the registered task names. No RPC is ever replayed: a request whose reply was
lost fails with ``ConnectionLost`` and its outcome is unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, ClassVar, ParamSpec, Self, TypeVar, Unpack, overload

from tay.errors import ConnectionLost, ModeError, ServerError, TaskRegistrationError, ValidationError
import tay.sdk.options as opts
from tay.sdk.connection import Link
from tay.sdk.executor import Executor
from tay.sdk.handles import (JobHandle, ScheduleHandle, SchedulePage, check_page_request, collect_schedules,
                             schedule_page_from_reply)
from tay.sdk.options import Durability, EnqueueOptions
from tay.sdk.socket_path import resolve_socket_path
from tay.sdk.task import Task, TaskCall, TaskDecorator, call_parts, register_task
from tay.sdk.wire import DEFAULT_MAX_FRAME_BYTES, plain_json, reply_durability, reply_identifier, validate_task_name

log = logging.getLogger("tay.sdk")

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MAX_RESULT_BYTES = 65_536
DEFAULT_MAX_ERROR_BYTES = 8_192
MODES = ("client", "embedded", "worker")
REGISTRATION_BATCH = 256  # the engine's default per-message task limit


def _check_limits(mode: Any, capacity: Any, max_frame_bytes: Any, max_result_bytes: Any,
                  max_error_bytes: Any, timeouts: tuple[Any, Any], delays: tuple[Any, Any]) -> None:
    if mode not in MODES:
        raise ValidationError(f"mode must be one of {sorted(MODES)}, not {mode!r}")
    if type(capacity) is not int or not 1 <= capacity <= 65_535:
        raise ValidationError(f"capacity must be an integer in 1..65535, got {capacity!r}")
    if type(max_frame_bytes) is not int or max_frame_bytes < 256:
        raise ValidationError(f"max_frame_bytes must be an integer of at least 256, got {max_frame_bytes!r}")
    if type(max_result_bytes) is not int or max_result_bytes < 1:
        raise ValidationError(f"max_result_bytes must be a positive integer, got {max_result_bytes!r}")
    if type(max_error_bytes) is not int or max_error_bytes < 128:
        raise ValidationError(f"max_error_bytes must be an integer of at least 128, got {max_error_bytes!r}")
    if not all(isinstance(value, (int, float)) and value > 0 for value in timeouts):
        raise ValidationError("request_timeout and connect_timeout must be positive numbers of seconds")
    initial, maximum = delays
    if not (isinstance(initial, (int, float)) and isinstance(maximum, (int, float)) and 0 < initial <= maximum):
        raise ValidationError("reconnect delays need 0 < reconnect_initial_delay <= reconnect_max_delay")


def _check_client_id(client_id: Any) -> str:
    if type(client_id) is not str or not client_id or "\x00" in client_id or len(client_id.encode()) > 128:
        raise ValidationError(f"client_id must be a non-empty string of at most 128 UTF-8 bytes, got {client_id!r}")
    return client_id


class Tay:
    """Async producer/executor over Tay's local Unix socket (Executor Protocol v1)."""

    _instances: ClassVar[weakref.WeakSet[Tay]] = weakref.WeakSet()

    def __init__(
        self,
        *,
        mode: str = "embedded",
        socket_path: str | os.PathLike[str] | None = None,
        capacity: int = 1,
        client_id: str | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_error_bytes: int = DEFAULT_MAX_ERROR_BYTES,
        request_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        reconnect_initial_delay: float = 0.05,
        reconnect_max_delay: float = 2.0,
        include_traceback: bool = True,
    ) -> None:
        _check_limits(mode, capacity, max_frame_bytes, max_result_bytes, max_error_bytes,
                      (request_timeout, connect_timeout), (reconnect_initial_delay, reconnect_max_delay))
        self.mode = mode
        self.socket_path = resolve_socket_path(socket_path)
        self.capacity = capacity
        self.client_id = _check_client_id(client_id or f"python-{uuid.uuid4().hex}")
        self.max_frame_bytes = max_frame_bytes
        self.max_result_bytes = max_result_bytes
        self.max_error_bytes = max_error_bytes
        self.request_timeout = float(request_timeout)
        self.connect_timeout = float(connect_timeout)
        self.reconnect_initial_delay = float(reconnect_initial_delay)
        self.reconnect_max_delay = float(reconnect_max_delay)
        self.include_traceback = bool(include_traceback)

        self._tasks: dict[str, Task[Any, Any]] = {}
        self._advertised: set[str] = set()  # desired registrations, replayed on reconnect
        self._schedule_declarations: dict[str, dict[str, Any]] = {}  # desired schedules
        self._executor = Executor(
            capacity=capacity, lookup=self._advertised_task, accepts_work=lambda: self.mode != "client",
            max_result_bytes=max_result_bytes, max_error_bytes=max_error_bytes, include_traceback=self.include_traceback,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._link: Link | None = None
        self._connected: asyncio.Event | None = None
        self._last_connection_error: BaseException | None = None
        # (protocol factory) -> (transport, Link) instead of the socket; tay.testing's in-process engine
        self._open_transport: Callable[[Callable[[], Link]], Awaitable[tuple[asyncio.BaseTransport, Link]]] | None = None
        Tay._instances.add(self)

    @classmethod
    def instances(cls) -> tuple[Tay, ...]:
        """Every live ``Tay`` object (the ``tay-worker`` command picks its instance here)."""
        return tuple(cls._instances)

    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.is_open and bool(self._connected and self._connected.is_set())

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """A copy of the local task registry, by name."""
        return self._tasks.copy()

    # -- task declaration ----------------------------------------------------------------

    @overload
    def task(self, function: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def task(self, function: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(self, function: None = None, *, name: str | None = None, retries: int | None = None,
             backoff: str | Mapping[str, Any] | None = None, durability: Durability | None = None,
             cron: str | None = None, every: Mapping[str, Any] | None = None, overlap: str | None = None,
             declaration_id: str | None = None) -> TaskDecorator: ...

    def task(
        self,
        function: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        retries: int | None = None,
        backoff: str | Mapping[str, Any] | None = None,
        durability: Durability | None = None,
        cron: str | None = None,
        every: Mapping[str, Any] | None = None,
        overlap: str | None = None,
        declaration_id: str | None = None,
    ) -> Task[Any, Any] | TaskDecorator:
        """Register a function as a task: ``@tay.task`` or ``@tay.task(name=..., ...)``."""
        config = opts.task_config(retries=retries, backoff=backoff, durability=durability, cron=cron,
                                  every=every, overlap=overlap, declaration_id=declaration_id)

        def register(candidate: Callable[..., Any]) -> Task[Any, Any]:
            task, created = register_task(self, self._tasks, candidate, name=name, config=config)
            if created:
                self._advertised.add(task.name)
            return task

        return register if function is None else register(function)

    def _advertised_task(self, name: str) -> Task[Any, Any] | None:
        return self._tasks.get(name) if name in self._advertised else None

    def _task_name(self, task: str | Task[Any, Any]) -> str:
        if isinstance(task, Task):
            if task.tay is not self:
                raise ValidationError(f"task {task.name!r} belongs to another Tay instance; pass its name instead")
            return task.name
        return validate_task_name(task)

    def _local_task_names(self, tasks: tuple[str | Task[Any, Any], ...]) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(self._task_name(task) for task in tasks))
        for name in names:
            if name not in self._tasks:
                raise TaskRegistrationError(f"task {name!r} is not registered on this Tay instance; decorate it with @tay.task first")
        return names

    async def register_tasks(self, *tasks: str | Task[Any, Any]) -> tuple[Task[Any, Any], ...]:
        """Advertise tasks declared after ``start()`` (kept across reconnects)."""
        if self.mode == "client":
            raise ModeError("client mode cannot register tasks; use mode='embedded' or 'worker'")
        names = self._local_task_names(tasks)
        if names:
            self._advertised.update(names)
            await self._request("register_tasks", {"tasks": list(names)})
        return tuple(self._tasks[name] for name in names)

    async def unregister_tasks(self, *tasks: str | Task[Any, Any]) -> tuple[str, ...]:
        """Stop advertising tasks; the withdrawal holds across reconnects."""
        if self.mode == "client":
            raise ModeError("client mode cannot unregister tasks; use mode='embedded' or 'worker'")
        names = self._local_task_names(tasks)
        if names:
            # Desired state first: an unknown outcome must not resurrect the capability.
            self._advertised.difference_update(names)
            await self._request("unregister_tasks", {"tasks": list(names)})
        return names

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback_: TracebackType | None) -> None:
        await self.close()

    def lifespan(self) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
        """An ASGI lifespan (FastAPI/Starlette ``lifespan=``) that starts and closes this client."""

        @contextlib.asynccontextmanager
        async def lifespan(_app: Any) -> AsyncGenerator[None, None]:
            async with self:
                yield

        return lifespan

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop.is_closed():
            self._loop = loop
            self._connected = asyncio.Event()
        elif self._loop is not loop:
            raise RuntimeError("a Tay instance must be used from one asyncio event loop")

    async def start(self) -> Tay:
        """Start the connection supervisor and wait (``connect_timeout``) until connected."""
        self._bind_loop()
        if self._supervisor is None or self._supervisor.done():
            self._supervisor = asyncio.create_task(self._supervise(), name="tay-supervisor")
        if not self.connected:
            assert self._connected is not None
            try:
                await asyncio.wait_for(self._connected.wait(), self.connect_timeout)
            except TimeoutError as exc:
                detail = f": {self._last_connection_error}" if self._last_connection_error else ""
                raise ConnectionLost(
                    f"could not connect to Tay at {self.socket_path!r} within {self.connect_timeout:g}s{detail}; "
                    "is `tay serve` running with this socket?"
                ) from exc
        return self

    async def close(self) -> None:
        """Stop reconnecting, fail pending requests, cancel async executions."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await supervisor
        link, self._link = self._link, None
        if link is not None:
            link.close(ConnectionLost("the Tay client was closed"))
            await link.wait_closed()
        if self._connected is not None:
            self._connected.clear()
        self._executor.shutdown()

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for running executions to finish; True when all did."""
        return await self._executor.drain(timeout)

    async def _supervise(self) -> None:
        assert self._connected is not None
        delay = self.reconnect_initial_delay
        while True:
            link = None
            try:
                link = await self._connect()
                await self._bootstrap(link)
                self._link = link
                self._connected.set()
                delay = self.reconnect_initial_delay
                await link.closed.wait()
                self._last_connection_error = link.close_reason
            except asyncio.CancelledError:
                if link is not None:
                    link.close(ConnectionLost("the Tay client was closed"))
                raise
            except Exception as exc:  # noqa: BLE001 - the supervisor survives every failure
                self._last_connection_error = exc
                if link is not None:
                    link.close(exc)
            self._connected.clear()
            if link is not None:
                self._executor.link_lost(link)
                await link.wait_closed()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.reconnect_max_delay)

    async def _connect(self) -> Link:
        def new_link() -> Link:
            return Link(max_frame_bytes=self.max_frame_bytes, on_message=self._on_message)

        opening = (asyncio.get_running_loop().create_unix_connection(new_link, self.socket_path)
                   if self._open_transport is None else self._open_transport(new_link))
        _, link = await asyncio.wait_for(opening, self.connect_timeout)
        return link

    async def _bootstrap(self, link: Link) -> None:
        timeout = self.request_timeout
        executes = self.mode != "client"
        await link.request("hello", {"mode": self.mode, "runtime_id": self.client_id,
                                     "max_concurrency": self.capacity if executes else 0}, timeout=timeout)
        declarations = dict(self._schedule_declarations)
        for task in self._tasks.values():
            declaration = task.static_schedule_declaration()
            if declaration is not None:
                declarations[declaration["declaration_id"]] = declaration
        for declaration_id in sorted(declarations):
            try:
                await link.request("schedule", declarations[declaration_id], timeout=timeout)
            except ServerError as exc:
                # One refused declaration must not keep every other one (and all task
                # registrations) offline in an endless reconnect loop.
                log.warning("Tay refused schedule %r on reconnect: %s", declaration_id, exc)
        # Capacity is advertised last so a recovered backlog cannot delay the control plane.
        names = sorted(self._advertised) if executes else []
        for start in range(0, len(names), REGISTRATION_BATCH):
            await link.request("register_tasks", {"tasks": names[start : start + REGISTRATION_BATCH]}, timeout=timeout)

    def _on_message(self, link: Link, message: dict[str, Any]) -> None:
        if message["type"] == "ping":
            with contextlib.suppress(ConnectionLost):
                link.send_event("pong", {"ping_id": message.get("ping_id")})
        else:
            self._executor.handle(link, message)

    async def _request(self, message_type: str, fields: Mapping[str, Any], *, plain: bool = False) -> dict[str, Any]:
        link = self._link
        if link is None or not self.connected:
            await self.start()  # connects, or refuses a second event loop
            link = self._link
            if link is None or not link.is_open:
                raise ConnectionLost(f"not connected to Tay at {self.socket_path!r}; {message_type!r} was not sent")
        return await link.request(message_type, fields, timeout=self.request_timeout, plain=plain)

    # -- producing -----------------------------------------------------------------------

    def _refuse_in_worker_mode(self, action: str) -> None:
        if self.mode == "worker":
            raise ModeError(f"worker mode only executes tasks; use mode='embedded' or 'client' to {action}")

    @overload
    async def enqueue(self, task: TaskCall[R], args: None = None, *, options: Mapping[str, Any] | None = None,
                      durability: Durability | None = None,
                      **option_keywords: Unpack[EnqueueOptions]) -> JobHandle[R]: ...
    @overload
    async def enqueue(self, task: str | Task[Any, Any], args: Mapping[str, Any] | None = None, *,
                      options: Mapping[str, Any] | None = None, durability: Durability | None = None,
                      **option_keywords: Unpack[EnqueueOptions]) -> JobHandle[Any]: ...

    async def enqueue(
        self,
        task: str | Task[Any, Any] | TaskCall[Any],
        args: Mapping[str, Any] | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        durability: Durability | None = None,
        **option_keywords: Any,
    ) -> JobHandle[Any]:
        """Submit one job of ``task`` with a JSON-object ``args``; returns its handle.

        ``task`` may be a bound call, ``task.bind(2, 5)``: its arguments are the job's and
        the handle is typed by the task's result. Pass ``submission_id=...`` to make a retry
        after ``ConnectionLost`` safe: the same id and definition reconcile to the same job
        instead of creating a second one.
        """
        if self.mode == "worker":
            self._refuse_in_worker_mode("enqueue")
        if type(task) is str:  # a task name: call_parts would give it back as it is
            name = validate_task_name(task)
        else:
            name, args, options = call_parts(task, args, options, option_keywords, durability, self._task_name)
        payload = {  # checked, not copied: the message is encoded before this call yields
            "task": name,
            "args": plain_json({} if args is None else opts.enqueue_args(args)),
            "options": plain_json(opts.merge_enqueue_options(options, durability, option_keywords)),
        }
        link = self._link
        if link is not None and self.connected:  # _request's first check, made once here
            reply = await link.request("enqueue", payload, timeout=self.request_timeout, plain=True, lean=True)
            if type(reply) is tuple:  # (job_id, durability), read without a decode (Link._enqueued)
                return JobHandle(reply[0], self, reply[1])
        else:  # _request connects first, or refuses
            reply = await self._request("enqueue", payload, plain=True)
        return JobHandle(reply_identifier(reply, "job_id", "job"), self, reply_durability(reply))

    # -- schedules -----------------------------------------------------------------------

    async def schedule(
        self,
        task: str | Task[Any, Any],
        *,
        cron: str,
        kwargs: Mapping[str, Any] | None = None,
        args: Mapping[str, Any] | None = None,
        declaration_id: str | None = None,
        timezone: str = "+00",
        catch_up: str = "latest",
        overlap: str | None = None,
        delay: float | None = None,
        start_at: int | None = None,
        **options: Any,
    ) -> ScheduleHandle:
        """Create (or idempotently redeclare) a durable cron schedule of ``task``."""
        self._refuse_in_worker_mode("schedule")
        opts.check_cron(cron)
        payload = opts.schedule_payload(self._task_name(task), kwargs, args, declaration_id, timezone, catch_up,
                                   overlap, delay, start_at, options, {"cron": cron, "timezone": timezone})
        return await self._declare(payload)

    async def every(
        self,
        task: str | Task[Any, Any],
        *,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        kwargs: Mapping[str, Any] | None = None,
        args: Mapping[str, Any] | None = None,
        declaration_id: str | None = None,
        catch_up: str = "latest",
        overlap: str | None = None,
        delay: float | None = None,
        start_at: int | None = None,
        **options: Any,
    ) -> ScheduleHandle:
        """Create (or redeclare) a durable interval schedule; give exactly one unit."""
        every = opts.every_mapping({"seconds": seconds, "minutes": minutes, "hours": hours, "days": days})
        self._refuse_in_worker_mode("schedule")
        payload = opts.schedule_payload(self._task_name(task), kwargs, args, declaration_id, "+00", catch_up,
                                   overlap, delay, start_at, options, {"every": every})
        return await self._declare(payload)

    async def _declare(self, payload: dict[str, Any]) -> ScheduleHandle:
        reply = await self._request("schedule", payload)
        schedule_id = reply_identifier(reply, "schedule_id", "schedule")
        self._schedule_declarations[schedule_id] = {**payload, "declaration_id": schedule_id}
        return ScheduleHandle(schedule_id, self)

    async def schedule_page(self, *, limit: int = 50, cursor: str | None = None) -> SchedulePage:
        """One bounded page of schedules (``limit`` 1..100); pass ``next_cursor`` on."""
        check_page_request(limit, cursor)
        fields: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            fields["cursor"] = cursor
        return schedule_page_from_reply(await self._request("schedules", fields))

    async def schedules(self, *, page_size: int = 50) -> list[dict[str, Any]]:
        """Every schedule, fetching pages until ``next_cursor`` is null."""
        return await collect_schedules(self.schedule_page, page_size)

    async def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        """The stored schedule object; ``ServerError`` code ``schedule_not_found`` if absent."""
        return (await self._schedule_request("schedule_status", schedule_id)).get("schedule", {})

    async def _schedule_request(self, message_type: str, schedule_id: str) -> dict[str, Any]:
        if type(schedule_id) is not str or not schedule_id:
            raise ValidationError(f"schedule_id must be a non-empty string, got {schedule_id!r}")
        return await self._request(message_type, {"schedule_id": schedule_id})

    async def _cancel_schedule(self, schedule_id: str) -> dict[str, Any]:
        # Desired state first: an unknown outcome must not resurrect the timer on reconnect.
        self._schedule_declarations.pop(schedule_id, None)
        return await self._schedule_request("cancel_schedule", schedule_id)

    async def _schedule_status(self, schedule_id: str) -> dict[str, Any]:
        return await self._schedule_request("schedule_status", schedule_id)

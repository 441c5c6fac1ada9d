"""``SyncTay``: the producer API as blocking calls, for WSGI apps (Django, Flask) and scripts.

It runs an async client (``Tay(mode="client")`` over the socket, or ``TayHTTP`` when given
``base_url``) on a private event-loop thread and waits for each call, so any number of
request threads can share one instance. The thread starts on first use and is started
again in a forked child (a pre-forking server that imported the app before the fork).
Calling it from inside a running event loop would block that loop: use ``Tay`` there.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack, overload

from tay.sdk.handles import HTTPJobHandle, JobHandle, SchedulePage
from tay.sdk.options import Durability, EnqueueOptions
from tay.sdk.task import Task, TaskCall

R = TypeVar("R")
T = TypeVar("T")

__all__ = ["SyncJobHandle", "SyncScheduleHandle", "SyncTay"]


class SyncTay:
    """Blocking producer: ``enqueue``, job handles and schedules, like ``Tay``/``TayHTTP``.

    ``SyncTay(socket_path=...)`` (or socket discovery) speaks to the local socket;
    ``SyncTay(base_url="https://...", tls_...=...)`` to the HTTP API. Other keywords go to
    the async client (``request_timeout``, ``connect_timeout``, TLS files, ...).
    """

    def __init__(self, *, socket_path: str | os.PathLike[str] | None = None, base_url: str | None = None,
                 **client_options: Any) -> None:
        if socket_path is not None and base_url is not None:
            from tay.errors import ValidationError

            raise ValidationError("pass either socket_path (Unix socket) or base_url (HTTP), not both")
        self._make_client = self._client_factory(socket_path, base_url, client_options)
        self._make_client()  # refuse bad arguments here, not on first use
        self._lock = threading.Lock()
        self._pid = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None

    @staticmethod
    def _client_factory(socket_path: Any, base_url: Any, options: dict[str, Any]) -> Callable[[], Any]:
        if base_url is not None:
            from tay.sdk.http import TayHTTP

            return lambda: TayHTTP(base_url, **options)
        from tay.sdk.client import Tay

        return lambda: Tay(mode="client", socket_path=socket_path, **options)

    # -- the loop thread ---------------------------------------------------------------

    def _running(self) -> tuple[asyncio.AbstractEventLoop, Any]:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve_loop, args=(loop, ready), name="tay-sync", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
                self._client = self._make_client()
            return self._loop, self._client

    @staticmethod
    def _serve_loop(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def _run(self, call: Callable[[Any], Awaitable[T]]) -> T:
        loop, client = self._running()
        return asyncio.run_coroutine_threadsafe(_awaited(call, client), loop).result()

    def close(self) -> None:
        """Close the connection and stop the loop thread (a later call starts them again)."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            self._loop = self._thread = self._client = None
        if loop is None or thread is None or self._pid != os.getpid():
            return
        asyncio.run_coroutine_threadsafe(client.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback_: TracebackType | None) -> None:
        self.close()

    # -- producing ---------------------------------------------------------------------

    @overload
    def enqueue(self, task: TaskCall[R], args: None = None, *, options: Mapping[str, Any] | None = None,
                durability: Durability | None = None,
                **option_keywords: Unpack[EnqueueOptions]) -> SyncJobHandle[R]: ...
    @overload
    def enqueue(self, task: str | Task[Any, Any], args: Mapping[str, Any] | None = None, *,
                options: Mapping[str, Any] | None = None, durability: Durability | None = None,
                **option_keywords: Unpack[EnqueueOptions]) -> SyncJobHandle[Any]: ...

    def enqueue(self, task: str | Task[Any, Any] | TaskCall[Any], args: Mapping[str, Any] | None = None, *,
                options: Mapping[str, Any] | None = None, durability: Durability | None = None,
                **option_keywords: Any) -> SyncJobHandle[Any]:
        """Submit one job, as ``Tay.enqueue`` (a ``Task`` of any Tay instance is sent by name)."""
        target = task.name if isinstance(task, Task) else task
        handle = self._run(lambda client: client.enqueue(target, args, options=options, durability=durability,
                                                         **option_keywords))
        return SyncJobHandle(handle.id, handle, self, handle.durability)

    def schedule(self, task: str | Task[Any, Any], *, cron: str, **arguments: Any) -> SyncScheduleHandle:
        """Create or redeclare a durable cron schedule, as ``Tay.schedule``."""
        name = task.name if isinstance(task, Task) else task
        handle = self._run(lambda client: client.schedule(name, cron=cron, **arguments))
        return SyncScheduleHandle(handle.id, handle, self)

    def every(self, task: str | Task[Any, Any], **arguments: Any) -> SyncScheduleHandle:
        """Create or redeclare a durable interval schedule, as ``Tay.every``."""
        name = task.name if isinstance(task, Task) else task
        handle = self._run(lambda client: client.every(name, **arguments))
        return SyncScheduleHandle(handle.id, handle, self)

    def schedule_page(self, *, limit: int = 50, cursor: str | None = None) -> SchedulePage:
        page: SchedulePage = self._run(lambda client: client.schedule_page(limit=limit, cursor=cursor))
        return page

    def schedules(self, *, page_size: int = 50) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._run(lambda client: client.schedules(page_size=page_size))
        return found

    def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self._run(lambda client: client.get_schedule(schedule_id))
        return found


async def _awaited(call: Callable[[Any], Awaitable[T]], client: Any) -> T:
    return await call(client)


@dataclass(frozen=True)
class SyncJobHandle(Generic[R]):
    """A job submitted through ``SyncTay``: blocking ``status``, ``cancel``, ``result``."""

    id: str
    _handle: JobHandle[R] | HTTPJobHandle[R] = field(repr=False)
    _owner: SyncTay = field(repr=False)
    durability: Durability | None = None

    def status(self) -> Any:
        return self._owner._run(lambda _client: self._handle.status())

    def cancel(self) -> Any:
        return self._owner._run(lambda _client: self._handle.cancel())

    def result(self, *, timeout: float | None = None) -> R:
        """As ``JobHandle.result``: ``timeout`` waits, raising ``ResultTimeout`` on expiry."""
        result: R = self._owner._run(lambda _client: self._handle.result(timeout=timeout))
        return result


@dataclass(frozen=True)
class SyncScheduleHandle:
    """A schedule declared through ``SyncTay``: blocking ``status`` and ``cancel``."""

    id: str
    _handle: Any = field(repr=False)
    _owner: SyncTay = field(repr=False)

    def status(self) -> Any:
        return self._owner._run(lambda _client: self._handle.status())

    def cancel(self) -> Any:
        return self._owner._run(lambda _client: self._handle.cancel())
